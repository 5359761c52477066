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
if [ $h200 = 1 ]; then
  echo "== an H200: issue 43's terrain table first"
  timeout $((limit - SECONDS)) bash scripts/device/run43.sh
fi
for c in lz4 etc1s; do
  for s in auto off; do
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 \
      --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst, median|upload span|uploads per frame' /tmp/r/burst-$c-$s.txt
  done
done
echo "bursts done (${SECONDS}s)"
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
$T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa > /dev/null 2>&1 || echo "bake photo etc1s failed"
for s in auto off; do
  motion $s --upload-slice-ms $s
  for cam in cut flyover; do
    timeout 60 $T capture --atlas /tmp/a/photo-etc1s.tsa --pool-format bc7 --camera $cam --frames 120 \
      --size 1920x1080 --upload-slice-ms $s --out /tmp/c/$cam-bc7-$s > /tmp/r/$cam-bc7-$s.txt 2>&1 || echo "FAILED $cam-bc7-$s"
    echo "== $cam-bc7-$s: $(grep -E 'fully resident \(every|became fully resident|cut at' /tmp/r/$cam-bc7-$s.txt | head -2 | tr '\n' ' ')"
  done
done
echo "motion done (${SECONDS}s)"
if [ $h200 = 1 ]; then
  echo "== an H200: issue 45's table"
  timeout $((limit - SECONDS)) bash scripts/device/run45f.sh
fi
echo "done (${SECONDS}s)"
