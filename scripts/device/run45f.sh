#!/bin/bash
# Issue 45's whole table on one card in one run: run45d.sh (the default path with the
# floor: the pass drawn again without feedback, and the stride-8 probe, on the
# photograph, its BC7 pool, 4x anisotropy, the 64K² mosaic RGBA8 and BC7, the lit
# dungeon), then bursts with the burst slice on (auto), off and at 0.25 ms, and the demo
# flight and the cut with it on and off. Carry .gl and .bin.
# Run as: timeout 590 bash scripts/device/run45f.sh; tar czf $OUT/run45f.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
$T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa > /dev/null 2>&1 || echo "bake photo etc1s failed"
bench_floor photo --atlas /tmp/a/photo.tsa --camera flyover
bench_floor photo-bc7 --atlas /tmp/a/photo-etc1s.tsa --camera flyover
bench_floor photo-aniso4 --atlas /tmp/a/photo.tsa --camera flyover --aniso 4
bench_floor mosaic --scene mosaic16k --camera flyover
bench_floor mosaic-bc7 --scene mosaic16k --codec etc1s --camera flyover
bench_floor dungeon --scene dungeon --codec etc1s
echo "floors done (${SECONDS}s)"
for c in lz4 etc1s; do
  for s in auto off 0.25; do
    [ $SECONDS -gt 400 ] && break
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst, median|upload span' /tmp/r/burst-$c-$s.txt
  done
done
for s in auto off; do
  [ $SECONDS -gt 520 ] && break
  motion $s --upload-slice-ms $s
done
echo "done (${SECONDS}s)"
