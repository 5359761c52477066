#!/bin/bash
# Issue 45's whole table on one card in one run: run45d.sh (the default path with the
# floor: the pass drawn again without feedback, and the stride-8 probe, on the
# photograph, its BC7 pool, 4x anisotropy, the 64K² mosaic RGBA8 and BC7, the lit
# dungeon), then run45e.sh (bursts with the slice on and off, the demo flight and the
# cut). Carry .gl and .bin.
# Run as: timeout 590 bash scripts/device/run45f.sh; tar czf $OUT/run45f.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
floor() { # name, then bench arguments
  local name=$1; shift
  timeout 120 $T bench "$@" --size 1920x1080 --frames 150 --warmup 30 \
    --json /tmp/r/$name.json > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name (${SECONDS}s)"
  grep -E '^ratio|^virtual texturing|^reference|^VT, ' /tmp/r/$name.txt
}
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo lz4 failed"
$T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa > /dev/null 2>&1 || echo "bake photo etc1s failed"
floor photo --atlas /tmp/a/photo.tsa --camera flyover
floor photo-bc7 --atlas /tmp/a/photo-etc1s.tsa --camera flyover
floor photo-aniso4 --atlas /tmp/a/photo.tsa --camera flyover --aniso 4
floor mosaic --scene mosaic16k --camera flyover
floor mosaic-bc7 --scene mosaic16k --codec etc1s --camera flyover
floor dungeon --scene dungeon --codec etc1s
echo "floors done (${SECONDS}s)"
for c in lz4 etc1s; do
  for s in auto off 0.25; do
    [ $SECONDS -gt 400 ] && break
    bench_1080p burst-$c-$s --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024 --upload-slice-ms $s
    grep -E 'over the idle|burst GPU|upload GPU' /tmp/r/burst-$c-$s.txt
  done
done
for s in auto off; do
  [ $SECONDS -gt 520 ] && break
  n=demo-$s
  timeout 60 $T demo --size 1920x1080 --upload-slice-ms $s --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every' /tmp/r/$n.txt | head -1)"
  n=cut-$s
  timeout 60 $T capture --atlas /tmp/a/photo.tsa --camera cut --frames 120 --size 1920x1080 --upload-slice-ms $s --out /tmp/c/$n > /tmp/r/$n.txt 2>&1 || echo "FAILED $n"
  echo "== $n: $(grep -E 'fully resident \(every|became fully resident|cut' /tmp/r/$n.txt | head -2 | tr '\n' ' ')"
done
echo "done (${SECONDS}s)"
