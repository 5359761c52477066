#!/usr/bin/env bash
# Peak memory of bakes whose inputs are larger than RAM would allow to decode whole
# (issue 26): generates the inputs into a scratch folder (default /tmp/tessera-bake-memory;
# several GB), bakes each with LZ4 and prints the peak resident set size.
#   scripts/bake-memory.sh [bigtiff|jpeg|grid ...]   (default: all three)
# Needs Python's tifffile and numpy (pip install tifffile numpy) for the BigTIFF and Pillow
# for the JPEG and the grid; the release `tessera` binary is built first.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${TESSERA_MEMORY_DIR:-/tmp/tessera-bake-memory}
mkdir -p "$dir"
# TESSERA_BIN: a `tessera` binary to use instead of building target/release/tessera.
tessera=${TESSERA_BIN:-}
if [ -z "$tessera" ]; then
  cargo build --release --locked -p tessera-cli
  tessera=target/release/tessera
fi
peak() { # peak RSS (MiB) and wall time of a command
  /usr/bin/time -f "%M %e" -o "$dir/time.txt" "$@" > "$dir/out.txt" 2>&1 || { cat "$dir/out.txt"; exit 1; }
  read -r kib secs < "$dir/time.txt"
  echo "$(tail -1 "$dir/out.txt")"
  echo "peak RSS $((kib / 1024)) MiB, ${secs} s"
}
for what in "${@:-bigtiff jpeg grid}"; do
  for w in $what; do
    case $w in
    bigtiff)
      # 32768² RGB, 512² tiles, BigTIFF, written tile by tile (a smooth ramp with a checker).
      [ -s "$dir/big.tif" ] || python3 - "$dir/big.tif" <<'PY'
import sys, numpy as np, tifffile
n, t = 32768, 512
def tiles():
    yy, xx = np.mgrid[0:t, 0:t]
    for ty in range(n // t):
        for tx in range(n // t):
            a = np.empty((t, t, 3), np.uint8)
            a[..., 0] = (xx + tx * t) * 255 // n
            a[..., 1] = (yy + ty * t) * 255 // n
            a[..., 2] = ((xx // 16 + yy // 16 + tx + ty) % 2) * 200
            yield a
tifffile.imwrite(sys.argv[1], data=tiles(), shape=(n, n, 3), dtype=np.uint8, tile=(t, t),
                 photometric="rgb", bigtiff=True)
PY
      echo "32768x32768 tiled BigTIFF:"
      peak "$tessera" bake "$dir/big.tif" --codec lz4 -o "$dir/big.tsa"
      ;;
    jpeg)
      [ -s "$dir/big.jpg" ] || python3 -c "
from PIL import Image; import sys
Image.linear_gradient('L').resize((21600, 21600)).convert('RGB').save(sys.argv[1], quality=90)" "$dir/big.jpg"
      echo "21600x21600 JPEG:"
      peak "$tessera" bake "$dir/big.jpg" --codec lz4 -o "$dir/jpeg.tsa"
      ;;
    grid)
      # Blue Marble's layout: eight 21600² images, A1 B1 C1 D1 / A2 B2 C2 D2.
      names=()
      for r in 1 2; do for c in A B C D; do
        f="$dir/$c$r.png"; names+=("$f")
        [ -s "$f" ] || python3 -c "
from PIL import Image, ImageDraw; import sys
im = Image.linear_gradient('L').resize((21600, 21600)).convert('RGB')
ImageDraw.Draw(im).text((100, 100), sys.argv[2], fill=(255, 0, 0))
im.save(sys.argv[1], compress_level=1)" "$f" "$c$r"
      done; done
      echo "86400x43200 grid of eight 21600² PNGs:"
      peak "$tessera" bake --grid 4x2 "${names[@]}" --codec lz4 -o "$dir/grid.tsa"
      ;;
    *) echo "unknown input kind $w (bigtiff, jpeg, grid)" >&2; exit 2 ;;
    esac
  done
done
