#!/bin/bash
# One device call for what the ninth session left unmeasured, most wanted first:
#  0. On an H200 only: issue 43's terrain table (run43.sh, ~20 s), the one figure that
#     issue still lacks.
#  1. Issue 45 bursts after block pools copy runs of tiles and stage level 1 from the
#     parents' bytes: the 64K² mosaic at 1080p, --flush-every 10 --upload-budget 1024,
#     slice off, ETC1S -> BC7 and LZ4 -> RGBA8, each merged (the default) and with
#     --per-tile-copies (one copy per tile, level-1 quadrants copied on the GPU one by
#     one: the code before) in the same run on the same card.
#  2. On an H200: issue 45's table (run45f.sh) in the time left. Elsewhere: the Bevy
#     prepass rows (run45c.sh, the dungeon with and without a DepthPrepass).
# Carry .gl and .bin (scripts/device/pack.sh makes both on a fresh checkout).
# Run as: LIMIT=585 bash scripts/device/run48.sh > /tmp/r48.log 2>&1; tar czf $OUT/run48.tgz -C /tmp r
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
if [ $h200 = 1 ]; then
  echo "== an H200: issue 43's terrain table first"
  timeout $((limit - SECONDS)) bash scripts/device/run43.sh
fi
for c in etc1s lz4; do
  for copies in merged per-tile; do
    extra=()
    [ $copies = per-tile ] && extra=(--per-tile-copies)
    bench_1080p burst-$c-$copies --scene mosaic16k --codec $c --camera flyover --flush-every 10 \
      --upload-budget 1024 --upload-slice-ms off "${extra[@]}"
    grep -E 'over the idle|burst, median|upload span' /tmp/r/burst-$c-$copies.txt
  done
done
echo "bursts done (${SECONDS}s)"
if [ $h200 = 1 ]; then
  echo "== an H200: issue 45's table"
  timeout $((limit - SECONDS)) bash scripts/device/run45f.sh
else
  echo "== not an H200: the Bevy prepass rows (run45c.sh)"
  LEVELS=${LEVELS:-dungeon} PREPASS_ONLY=${PREPASS_ONLY:-1} FRAMES=300 timeout $((limit - SECONDS)) bash scripts/device/run45c.sh
fi
echo "done (${SECONDS}s)"
