#!/bin/bash
# Issue 45 item 3, bursts spread: tessera bench at 1080p on the 64K² mosaic with the
# pool flushed every 10 frames (--upload-budget 1024), LZ4 -> RGBA8 and ETC1S -> BC7,
# the burst slice on (auto: 0.5 ms) against off and 0.25 ms; then the demo flight and
# the cut camera (motion must keep its figures) with the slice on and off. Carry .gl
# and .bin. Run as: timeout 560 bash scripts/device/run45e.sh; tar czf $OUT/run45e.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
for c in lz4 etc1s; do
  for s in auto off 0.25; do
    [ $SECONDS -gt 330 ] && break
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst GPU|upload GPU' /tmp/r/burst-$c-$s.txt
  done
done
for s in auto off; do
  [ $SECONDS -gt 480 ] && break
  n=demo-$s
  timeout 60 $T demo --size 1920x1080 --upload-slice-ms $s --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every' /tmp/r/$n.txt | head -1)"
  n=cut-$s
  timeout 60 $T capture --atlas /tmp/a/photo.tsa --camera cut --frames 120 --size 1920x1080 --upload-slice-ms $s --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every|became fully resident|cut' /tmp/r/$n.txt | head -2 | tr '\n' ' ')"
done
echo "done (${SECONDS}s)"
