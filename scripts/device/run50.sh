#!/bin/bash
# After run49 (H100, 2026-12-07) found the slice (--upload-slice-ms auto) holding an
# RGBA8 burst to 16 tiles a frame (tiles waiting for their turn lost their staging, and
# the CPU and GPU prices were added though the GPU's span already held the recording),
# one call for the fixed slice, most wanted first:
#  0. On an H200 only: issue 43's terrain table (run43.sh).
#  1. Issue 45 bursts: the 16K² mosaic at 1080p, --flush-every 10 --upload-budget 1024,
#     LZ4 -> RGBA8 and ETC1S -> BC7, the slice auto and off in one run.
#  2. Motion with the slice auto and off: the demo flight and the cut camera on the
#     photograph (RGBA8), then the cut and flyover cameras with a BC7 pool.
#  3. On an H200: issue 45's table (run45f.sh) in the time left.
# Carry .gl and .bin (scripts/device/pack.sh makes both on a fresh checkout).
# Run as: LIMIT=560 bash scripts/device/run50.sh > /tmp/r50.log 2>&1; tar czf $OUT/run50.tgz -C /tmp r
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
for c in lz4 etc1s; do
  for s in auto off; do
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 \
      --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst, median|upload span|uploads per frame' /tmp/r/burst-$c-$s.txt
  done
done
echo "bursts done (${SECONDS}s)"
bake_photos
for s in auto off; do
  motion $s --upload-slice-ms $s
  motion_bc7 -$s --upload-slice-ms $s
done
echo "motion done (${SECONDS}s)"
h200_last
echo "done (${SECONDS}s)"
