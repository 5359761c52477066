#!/bin/bash
# Bevy plugin (issue 16): the gltf_scene level (the CC0 dungeon) with its textures streamed
# through bevy_tessera against the same texels fully resident in Bevy's StandardMaterial,
# on the H200: frame time (wall and GPU medians) and GPU memory (nvidia-smi peak above
# idle, and the textures' own bytes).
# Carry .gl, .bin/scene_bench.xz (the stripped release build of the scene_bench example:
#   CARGO_PROFILE_RELEASE_STRIP=true cargo build --release --no-default-features --example scene_bench
#   in engine/bevy_tessera, then xz -9) and .bin/data/dungeon (assets/fetch-data.sh --dungeon).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
xz -dc .bin/scene_bench.xz > /tmp/scene_bench 2>/dev/null \
  || python3 -c "import lzma,sys; open('/tmp/scene_bench','wb').write(lzma.open('.bin/scene_bench.xz').read())"
chmod +x /tmp/scene_bench
nproc; nvidia-smi --query-gpu=name,driver_version,memory.used --format=csv,noheader
# The first run bakes the level's atlas into $XDG_CACHE_HOME (not timed).
/tmp/scene_bench --textures streamed --camera still --frames 10 --size 640x360 > /dev/null
idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
echo "idle MiB: $idle"
frames=${FRAMES:-600}
for size in 1920x1080 3840x2160; do
  for camera in still walk; do
    for textures in resident streamed; do
      (while true; do nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1; sleep 0.1; done) > /tmp/mem.txt &
      sampler=$!
      line=$(/tmp/scene_bench --textures $textures --camera $camera --frames $frames --size $size 2>&1 | tail -1)
      kill $sampler
      peak=$(sort -n /tmp/mem.txt | tail -1)
      echo "{\"run\":$line,\"vram_peak_mib\":$peak,\"vram_idle_mib\":$idle}" | tee -a $OUT/scene_bench.jsonl
    done
  done
done
