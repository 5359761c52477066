#!/bin/bash
# Issue 45 item 3 after the price fit: bursts (--flush-every 10 --upload-budget 1024 on the
# 64K² mosaic, LZ4 -> RGBA8 and ETC1S -> BC7) with the slice on (auto) and off in the
# same run, then the demo flight and the cut with the slice on. Carry .gl and .bin.
# Run as: timeout 300 bash scripts/device/run45g.sh; tar czf $OUT/run45g.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
for c in lz4 etc1s; do
  for s in auto off; do
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst, median|upload span' /tmp/r/burst-$c-$s.txt
  done
done
motion auto --upload-slice-ms auto
echo "done (${SECONDS}s)"
