#!/bin/bash
# Issue 41 on the H200 at 1080p, after the material reference learnt the bake's border
# rule: the dungeon (a material scene: albedo sRGB, normal and ORM linear) walked with
# each codec and the default pool (BC7 on a desktop GPU), then RGBA8 and BC1 forced;
# then static captures of the Blue Marble photograph as run41.sh does, while time lasts.
# Carry .gl, .bin/tessera.xz and .bin/data (bmng.jpg, dungeon/), as run41.sh says.
# Run as: timeout 260 bash scripts/device/run41b.sh; tar czf $OUT/run41b.tgz -C /tmp r
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r /tmp/a && chmod 700 /tmp/xdg
xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"
chmod +x /tmp/tessera
T=/tmp/tessera
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
walk() { # name, frames, then capture arguments
  local name=$1 frames=$2; shift 2
  timeout 60 $T capture --scene dungeon --camera walk --frames $frames --size 1920x1080 --reference "$@" \
    --out /tmp/c/$name > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  cp /tmp/c/$name/stats.json /tmp/r/$name-stats.json 2>/dev/null
  python3 - "$name" <<'PY'
import json, statistics, sys
name = sys.argv[1]
try:
    s = json.load(open(f"/tmp/r/{name}-stats.json"))
    p = [f["psnr_db"] for f in s["frames"] if f.get("psnr_db") is not None]
    print(f"== {name}: frames {len(p)}, median {statistics.median(p):.2f}, from frame 8 min {min(p[8:]):.2f}, last {p[-1]:.2f} dB")
except Exception as e:
    print(f"== {name}: no figures ({e})")
PY
  grep -oE 'pool: [^;]*' /tmp/r/$name.txt | head -1
}
walk dungeon-etc1s-default 40 --codec etc1s
walk dungeon-uastc-default 40 --codec uastc
walk dungeon-lz4 40 --codec lz4
walk dungeon-etc1s-rgba8 40 --codec etc1s --pool-format rgba8
walk dungeon-etc1s-bc1 40 --codec etc1s --pool-format bc1
walk dungeon-etc1s-default-software 40 --codec etc1s --trilinear software
echo "dungeon done (${SECONDS}s)"
cap() { # name, then capture arguments
  local name=$1; shift
  timeout 60 $T capture "$@" --camera static --frames 3 --size 1920x1080 --reference --wait-resident 20 \
    --out /tmp/c/$name > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name: $(grep -oE 'pool: [^;]*' /tmp/r/$name.txt | head -1); $(grep -oE '[0-9.]+% resident, last frame PSNR [0-9.]+ dB|identical to reference' /tmp/r/$name.txt)"
}
for c in etc1s uastc; do
  [ $SECONDS -gt 170 ] && break
  $T bake .bin/data/bmng.jpg --codec $c -o /tmp/a/photo-$c.tsa > /dev/null 2>&1 || echo "bake photo $c failed"
  for t in hardware software; do
    [ $SECONDS -gt 200 ] && break
    cap photo-$c-default-$t --atlas /tmp/a/photo-$c.tsa --trilinear $t
    cap photo-$c-bc1-$t --atlas /tmp/a/photo-$c.tsa --trilinear $t --pool-format bc1
  done
done
echo "done (${SECONDS}s)"
