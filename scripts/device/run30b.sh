#!/bin/bash
# Bevy plugin render cost (issue 30 item 3): the dungeon level streamed through
# bevy_tessera against the same texels resident in StandardMaterial, with and without a
# DepthPrepass on the camera (with one, streamed materials record their feedback in the
# prepass and their main pass has no side effect), 1920x1080, still and walk.
# Carry .gl, .bin/scene_bench.xz (in engine/bevy_tessera:
#   CARGO_PROFILE_RELEASE_STRIP=true cargo build --release --ignore-rust-version --no-default-features --example scene_bench
#   then xz -9 target/release/examples/scene_bench) and .bin/data/dungeon.
# Run as: timeout 560 bash scripts/device/run30b.sh; tar czf $OUT/run30b.tgz -C /tmp r
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r && chmod 700 /tmp/xdg
xz -dc .bin/scene_bench.xz > /tmp/scene_bench 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/scene_bench','wb').write(lzma.open('.bin/scene_bench.xz').read())"
chmod +x /tmp/scene_bench
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# The first run bakes the level's atlas into $XDG_CACHE_HOME (not timed).
/tmp/scene_bench --textures streamed --camera still --frames 10 --size 640x360 > /dev/null 2>&1 || echo "bake run failed"
for camera in still walk; do
  for prepass in "" --prepass; do
    for textures in resident streamed; do
      line=$(timeout 120 /tmp/scene_bench --textures $textures --camera $camera --frames 600 --size 1920x1080 $prepass 2>/tmp/r/err.txt | tail -1)
      echo "$line" >> /tmp/r/scene_bench.jsonl
      echo "== $camera ${prepass:-no-prepass} $textures (${SECONDS}s)"
      python3 -c "import json,sys; d=json.loads(sys.argv[1]); print(d['gpu_ms_median'], d['opaque_pass_gpu_ms_median'], d['prepass_gpu_ms_median'], d['wall_ms_median'], d['mean_resident_fraction'])" "$line" 2>/dev/null \
        || { echo "FAILED"; tail -3 /tmp/r/err.txt; }
    done
  done
done
