#!/bin/bash
# Issue 45, the floor and the anatomy of a burst: tessera bench at 1080p with the probe
# (stride 8) and the pass drawn again without feedback (the floor), on the photograph
# (RGBA8, BC7, 4x anisotropy), the 64K² mosaic and the lit dungeon; then bursts
# (--flush-every 10 --upload-budget 1024, LZ4 -> RGBA8 and ETC1S -> BC7) with the GPU
# time of their uploads, page-table update and scene pass. Carry .gl and .bin.
# Run as: timeout 560 bash scripts/device/run45d.sh; tar czf $OUT/run45d.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
$T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa > /dev/null 2>&1 || echo "bake photo etc1s failed"
bench_floor photo --atlas /tmp/a/photo.tsa --camera flyover
bench_floor photo-bc7 --atlas /tmp/a/photo-etc1s.tsa --camera flyover
bench_floor photo-aniso4 --atlas /tmp/a/photo.tsa --camera flyover --aniso 4
bench_floor mosaic --scene mosaic16k --camera flyover
bench_floor dungeon --scene dungeon --codec etc1s
echo "floors done (${SECONDS}s)"
for c in lz4 etc1s; do
  [ $SECONDS -gt 480 ] && break
  bench_1080p burst-$c --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024
  grep -E 'burst, median|upload span' /tmp/r/burst-$c.txt
done
echo "done (${SECONDS}s)"
