#!/bin/bash
# Issue 45 item 1 on a GPU: the feedback paths' cost, virtual texturing against the fully
# resident reference (tessera bench GPU-pass medians, 1080p, 150 frames after 30 warm-up):
# the default (feedback through the colour target) against the storage bitset (early depth
# forced) at strides 2, 4, 8 and 16 (one pixel in stride² writes, the pixel moving every
# frame); stride 16 is the nearest this build has to no feedback at all (1/256 of the
# pixels write). Then the demo flight and the cut camera's residency at each storage
# stride (motion quality). Carry .gl and .bin (tessera.xz, data/ with bmng.jpg,
# shadedrelief.jpg, etopo1.jpg and dungeon/).
# Run as: timeout 560 bash scripts/device/run45.sh; tar czf $OUT/run45.tgz -C /tmp r
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r /tmp/a && chmod 700 /tmp/xdg
[ -x /tmp/tessera ] || { xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"; chmod +x /tmp/tessera; }
T=/tmp/tessera
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
bench() { # name, then bench arguments
  local name=$1; shift
  timeout 90 $T bench "$@" --size 1920x1080 --frames 150 --warmup 30 --no-feedback-probe \
    --json /tmp/r/$name.json > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name (${SECONDS}s): $(grep -E '^ratio VT/reference' /tmp/r/$name.txt | head -1)"
  grep -E '^virtual texturing|^reference|feedback CPU|^feedback' /tmp/r/$name.txt | head -4
}
variants() { # prefix, then scene arguments
  local p=$1; shift
  bench $p-target "$@"
  for s in 2 4 8 16; do
    [ $SECONDS -gt 400 ] && return
    bench $p-storage$s "$@" --feedback storage --feedback-stride $s
  done
}
$T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 || echo "bake photo failed"
variants photo --atlas /tmp/a/photo.tsa --camera flyover
variants mosaic --scene mosaic16k --camera flyover
variants dungeon --scene dungeon --codec etc1s
echo "benches done (${SECONDS}s)"
for s in 0 2 4 8; do
  [ $SECONDS -gt 470 ] && break
  extra=; [ $s != 0 ] && extra="--feedback storage --feedback-stride $s"
  timeout 60 $T demo --size 1920x1080 $extra --out /tmp/c/demo$s > /tmp/r/demo$s.txt 2>&1 || echo "FAILED demo$s"
  echo "== demo stride $s: $(grep -iE 'fully resident' /tmp/r/demo$s.txt | head -2 | tr '\n' ' ')"
done
echo "done (${SECONDS}s)"
