#!/bin/bash
# Issue 45's table with the new default feedback path (the storage bitset, early depth
# forced, on a hardware GPU): tessera bench GPU-pass medians at 1080p, 150 frames after 30
# warm-up, the default against --feedback target (the old default) in the same run, on
# the photograph (RGBA8, BC7, 4x anisotropy), the 64K² mosaic (LZ4 -> RGBA8, ETC1S -> BC7)
# and the lit dungeon (ETC1S); then the demo flight and the cut camera's residency, and
# bursts (--flush-every 10 --upload-budget 1024). Carry .gl and .bin (tessera.xz, data/).
# Run as: timeout 560 bash scripts/device/run45b.sh; tar czf $OUT/run45b.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
both() { # name, then bench arguments: the new default, then the old one
  local name=$1; shift
  bench_1080p $name "$@"
  bench_1080p $name-target "$@" --feedback target
}
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
$T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa > /dev/null 2>&1 || echo "bake photo etc1s failed"
both photo --atlas /tmp/a/photo.tsa --camera flyover
both photo-bc7 --atlas /tmp/a/photo-etc1s.tsa --camera flyover
both photo-aniso4 --atlas /tmp/a/photo.tsa --camera flyover --aniso 4
both mosaic --scene mosaic16k --camera flyover
both mosaic-bc7 --scene mosaic16k --codec etc1s --camera flyover
both dungeon --scene dungeon --codec etc1s
echo "benches done (${SECONDS}s)"
for f in "" "--feedback target"; do
  [ $SECONDS -gt 430 ] && break
  n=demo${f:+-target}
  timeout 60 $T demo --size 1920x1080 $f --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every' /tmp/r/$n.txt | head -1)"
  n=cut${f:+-target}
  timeout 60 $T capture --atlas /tmp/a/photo.tsa --camera cut --frames 120 --size 1920x1080 $f --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every|became fully resident|cut' /tmp/r/$n.txt | head -2 | tr '\n' ' ')"
done
for c in lz4 etc1s; do
  [ $SECONDS -gt 500 ] && break
  bench_1080p burst-$c --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024
done
echo "done (${SECONDS}s)"
