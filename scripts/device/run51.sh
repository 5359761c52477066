#!/bin/bash
# After run50 (H100, 2026-12-07): the fixed slice refills a flushed pool in 8 frames with
# every tile staged, but a 0.5 ms slice on each side plus a burst frame's own overhead
# (feedback and decisions, ~0.4 ms) still goes past +1 ms at p95 (ETC1S -> BC7: +0.90 /
# +1.40 ms). One call for the slice's size: bursts with the slice off, at 0.25 ms, at
# 0.35 ms and auto (0.5 ms), then motion at 0.25 ms. 100 warm-up frames, not 30: in
# run49 and run50 the GPU ran slow for the first 20-25 measured frames of some runs.
#  0. On an H200 only: issue 43's terrain table (run43.sh).
#  1. The 16K² mosaic at 1080p, --flush-every 10 --upload-budget 1024, LZ4 -> RGBA8 and
#     ETC1S -> BC7.
#  2. The demo flight, the cut camera (RGBA8), the cut and flyover cameras with a BC7
#     pool, at 0.25 ms.
#  3. On an H200: issue 45's table (run45f.sh) in the time left.
# Carry .gl and .bin. Run as: LIMIT=560 bash scripts/device/run51.sh > /tmp/r51.log 2>&1
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
for c in lz4 etc1s; do
  for s in ${SLICES:-off 0.25 0.35 auto}; do
    name=burst-$c-$s
    burst $name --codec $c --flush-every 10 --upload-slice-ms $s
    echo "== $name (${SECONDS}s)"
    grep -E 'over the idle|burst, median|upload bursts|uploads per frame' /tmp/r/$name.txt
  done
done
echo "bursts done (${SECONDS}s)"
bake_photos
for s in ${MOTION_SLICES:-0.25}; do
  motion $s --upload-slice-ms $s
  motion_bc7 -$s --upload-slice-ms $s
done
echo "motion done (${SECONDS}s)"
h200_last
echo "done (${SECONDS}s)"
