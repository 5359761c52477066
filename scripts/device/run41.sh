#!/bin/bash
# Convergence at 1080p (issue 41): a fully resident frame against the reference built
# from the atlas' own texels, for every codec (LZ4, ETC1S, UASTC), both colour spaces,
# the default pool (BC7 on a desktop GPU) and the forced ones, on both trilinear paths;
# then the ETC1S dungeon walk (a material scene: albedo sRGB, normal and ORM linear).
# Carry .gl, .bin/tessera.xz (CARGO_PROFILE_RELEASE_STRIP=true cargo build --release
# -p tessera-cli; xz -9) and .bin/data (bmng.jpg, etopo1.jpg, dungeon/ from
# assets/fetch-data.sh --dungeon).
# Run as: timeout 560 bash scripts/device/run41.sh; tar czf $OUT/run41.tgz -C /tmp r
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
# Bakes (not timed): the Blue Marble photograph (sRGB) and the ETOPO1 relief as linear data.
for c in lz4 etc1s uastc; do
  $T bake .bin/data/bmng.jpg --codec $c -o /tmp/a/photo-$c.tsa > /dev/null 2>&1 || echo "bake photo $c failed"
  $T bake .bin/data/etopo1.jpg --color linear --codec $c -o /tmp/a/relief-$c.tsa > /dev/null 2>&1 \
    || echo "bake relief $c failed"
done
echo "bakes done (${SECONDS}s)"
# One static capture, waiting for residency, against the atlas' own reference.
cap() { # name, then capture arguments
  local name=$1; shift
  timeout 60 $T capture "$@" --camera static --frames 3 --size 1920x1080 --reference --wait-resident 20 \
    --out /tmp/c/$name > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name: $(grep -oE 'pool: [^;]*' /tmp/r/$name.txt | head -1); $(grep -oE '[0-9.]+% resident, last frame PSNR [0-9.]+ dB|identical to reference' /tmp/r/$name.txt)"
}
for a in photo relief; do
  for c in lz4 etc1s uastc; do
    for t in hardware software; do
      cap $a-$c-default-$t --atlas /tmp/a/$a-$c.tsa --trilinear $t
      [ $c = lz4 ] && continue
      for p in rgba8 bc1; do
        cap $a-$c-$p-$t --atlas /tmp/a/$a-$c.tsa --trilinear $t --pool-format $p
      done
    done
  done
done
# The ETC1S dungeon (the built-in catalog's glTF level): a walk at 1080p, frame by frame.
timeout 200 $T capture --scene dungeon --codec etc1s --camera walk --frames 120 --size 1920x1080 --reference \
  --out /tmp/c/dungeon > /tmp/r/dungeon.txt 2>&1 || echo "FAILED dungeon"
cp /tmp/c/dungeon/stats.json /tmp/r/dungeon-stats.json 2>/dev/null
echo "== dungeon etc1s walk (${SECONDS}s)"; grep -vE "^adapter|written to" /tmp/r/dungeon.txt | head -6
