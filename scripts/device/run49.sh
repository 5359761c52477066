#!/bin/bash
# After run48 (H100, 2026-12-07) measured merged block-pool copies with the slice off, one
# call for what follows from it, most wanted first:
#  0. On an H200 only: issue 43's terrain table (run43.sh, ~20 s).
#  1. Issue 45 bursts with the slice on (--upload-slice-ms auto), now that a BC7 tile costs
#     a third of what it did: the 16K² mosaic at 1080p, --flush-every 10 --upload-budget
#     1024, ETC1S -> BC7 and LZ4 -> RGBA8, each with the slice auto and off in one run.
#  2. Motion with a BC7 pool, slice auto and off: the cut and flyover cameras over the
#     photograph baked ETC1S (fully resident frames; a cut resident in 1 frame is the
#     figure the default keeps).
#  3. On an H200: issue 45's table (run45f.sh) in the time left.
# Carry .gl and .bin (scripts/device/pack.sh makes both on a fresh checkout).
# BURST_SLICES=auto skips the burst rows with the slice off (run48 has them, same binary);
# BURST_CODECS=etc1s skips the RGBA8 rows (run45g met the target with the slice on).
# Run as: LIMIT=560 bash scripts/device/run49.sh > /tmp/r49.log 2>&1; tar czf $OUT/run49.tgz -C /tmp r
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
for c in ${BURST_CODECS:-etc1s lz4}; do
  for s in ${BURST_SLICES:-auto off}; do
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 \
      --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst, median|upload span' /tmp/r/burst-$c-$s.txt
  done
done
echo "bursts done (${SECONDS}s)"
bake_photos
for s in auto off; do
  motion_bc7 -$s --upload-slice-ms $s
done
echo "motion done (${SECONDS}s)"
h200_last
echo "done (${SECONDS}s)"
