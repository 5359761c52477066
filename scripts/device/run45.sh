#!/bin/bash
# Issue 45 item 1 on a GPU: the feedback paths' cost, virtual texturing against the fully
# resident reference (tessera bench GPU-pass medians, 1080p, 150 frames after 30 warm-up):
# the default (feedback through the colour target) against the storage bitset (early depth
# forced) at strides 2, 4 and 8 (one pixel in stride² writes, the pixel moving every
# frame); stride 8, the largest the CLI takes, is the nearest this build has to no
# feedback at all (1/64 of the pixels write). Then the demo flight and the cut camera's residency at each storage
# stride (motion quality). Carry .gl and .bin (tessera.xz, data/ with bmng.jpg,
# shadedrelief.jpg, etopo1.jpg and dungeon/).
# Run as: timeout 560 bash scripts/device/run45.sh; tar czf $OUT/run45.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
variants() { # prefix, then scene arguments
  local p=$1; shift
  bench_1080p $p-target "$@"
  for s in 2 4 8; do
    [ $SECONDS -gt 400 ] && return
    bench_1080p $p-storage$s "$@" --feedback storage --feedback-stride $s
  done
}
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo failed"
variants photo --atlas /tmp/a/photo.tsa --camera flyover
variants mosaic --scene mosaic16k --camera flyover
variants dungeon --scene dungeon --codec etc1s
echo "benches done (${SECONDS}s)"
for s in 0 2 4 8; do
  [ $SECONDS -gt 470 ] && break
  extra="--feedback target"; [ $s != 0 ] && extra="--feedback storage --feedback-stride $s"
  timeout 60 $T demo --size 1920x1080 $extra --out /tmp/c/demo$s > /tmp/r/demo$s.txt 2>&1 || echo "FAILED demo$s"
  echo "== demo stride $s: $(grep -iE 'fully resident' /tmp/r/demo$s.txt | head -2 | tr '\n' ' ')"
done
echo "done (${SECONDS}s)"
