#!/bin/bash
# Remote atlases (issue 15): format v1 against v2 over HTTP with a 20 ms round trip, on the H200.
# .bin/gpu-bench is the stripped `gpu` test binary (cargo test -p tessera-tests --test gpu --no-run).
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan XDG_CACHE_HOME=/tmp/cache RUST_LOG=warn XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for size in 1920x1080 640x360; do
  TESSERA_BENCH_SERVER=builtin TESSERA_BENCH_SIZE=$size .bin/gpu-bench remote_latency_table --ignored --nocapture 2>&1 | grep -E "^\||range server|panicked" | tee $OUT/remote-$size.txt
done
# A larger atlas (32768x16384: 43,691 tiles, a 1 MB index that v1 reads whole at open).
TESSERA_BENCH_SERVER=builtin TESSERA_BENCH_SIZE=1920x1080 TESSERA_BENCH_TEXTURE=32768x16384 .bin/gpu-bench remote_latency_table --ignored --nocapture 2>&1 | grep -E "^\||range server|panicked" | tee $OUT/remote-32k-1920x1080.txt
