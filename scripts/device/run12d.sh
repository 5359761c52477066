#!/bin/bash
# Render cost (issue 12), second pass: v2 shader (post-lookup chain from the lookup's tile position) vs v1, dungeon, 512K. H200.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache RUST_LOG=warn XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { bin=$1; name=$2; shift 2; echo "=== $name ($bin): $*"; /usr/bin/time -f "%e s" .bin/$bin bench "$@" --no-feedback-probe --json $OUT/$name.json > $OUT/$name.txt 2>$OUT/$name.err; tail -1 $OUT/$name.err; grep -E "^reference|^virtual|^ratio|sampling" $OUT/$name.txt | head -4; }
F="--scene mosaic16k --camera flyover"
O="--scene mosaic16k --camera orbit"
D="--scene dungeon"
run tessera fly-v2 $F
run tessera_v1 fly-v1 $F
run tessera orbit-v2 $O
run tessera_v1 orbit-v1 $O
run tessera fly-aniso-v2 $F --aniso 4
run tessera fly-aniso-sw $F --aniso 4 --shader-probe software
run tessera fly-lod $F --shader-probe lod-only
run tessera fly-nolookup $F --shader-probe no-lookup
run tessera fly-lookup $F --shader-probe lookup-only
run tessera fly-sw $F --shader-probe software
run tessera fly-texture $F --page-table texture
run tessera dun-v2 $D
run tessera_v1 dun-v1 $D
run tessera dun-texture $D --page-table texture
run tessera dun-noearly $D --no-early-depth
run tessera dun-lod $D --shader-probe lod-only
run tessera dun-nolookup $D --shader-probe no-lookup
run tessera dun-sw $D --shader-probe software
run tessera globe-v2 --scene globe
S="--scene stress512k --camera flyover --frames 60"
run tessera s512-buffer $S
run tessera s512-texture $S --page-table texture
