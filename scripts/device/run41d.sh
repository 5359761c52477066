#!/bin/bash
# Issue 41's last 1080p rows: the ETOPO1 relief baked --color linear, ETC1S and UASTC,
# default (BC7) and forced BC1 pools, hardware and software trilinear, after block pools'
# references became textures in the pool's own format. Carry .gl and .bin (tessera.xz,
# data/etopo1.jpg). Run as: timeout 120 bash scripts/device/run41d.sh
source scripts/device/prepare.sh
for c in etc1s uastc; do
  $T bake .bin/data/etopo1.jpg --color linear --codec $c -o /tmp/a/relief-$c.tsa > /dev/null 2>&1 || echo "bake relief $c failed"
  for t in hardware software; do
    for p in default bc1; do
      name=relief-$c-$p-$t; extra=; [ $p = bc1 ] && extra="--pool-format bc1"
      timeout 40 $T capture --atlas /tmp/a/relief-$c.tsa --trilinear $t $extra --camera static --frames 3 \
        --size 1920x1080 --reference --wait-resident 20 --out /tmp/c/$name > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
      echo "== $name: $(grep -oE 'pool: [^;]*' /tmp/r/$name.txt | head -1); $(grep -oE '[0-9.]+% resident, last frame PSNR [0-9.]+ dB|identical to reference' /tmp/r/$name.txt)"
    done
  done
done
echo "done (${SECONDS}s)"
