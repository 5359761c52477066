#!/bin/bash
# Render cost (issue 12): page table in a buffer vs a texture, per-mip constants (new vs old binary), probes. H200.
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache RUST_LOG=warn XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
run() { bin=$1; name=$2; shift 2; echo "=== $name ($bin): $*"; /usr/bin/time -f "%e s" .bin/$bin bench "$@" --no-feedback-probe --json $OUT/$name.json > $OUT/$name.txt 2>$OUT/$name.err; tail -1 $OUT/$name.err; grep -E "^reference|^virtual|^ratio|sampling" $OUT/$name.txt | head -4; }
PART=${1:-1}
if [ $PART = 1 ]; then
F="--scene mosaic16k --camera flyover"
run tessera fly-buffer $F
run tessera fly-texture $F --page-table texture
run tessera_old fly-old $F
run tessera fly-stride4 $F --feedback-stride 4
run tessera fly-lod $F --shader-probe lod-only
run tessera fly-nolookup $F --shader-probe no-lookup
run tessera fly-lookup $F --shader-probe lookup-only
O="--scene mosaic16k --camera orbit"
run tessera orbit-buffer $O
run tessera orbit-texture $O --page-table texture
run tessera_old orbit-old $O
run tessera fly-aniso-buffer $F --aniso 4
run tessera fly-aniso-texture $F --aniso 4 --page-table texture
else
D="--scene dungeon"
run tessera dun-buffer $D
run tessera dun-texture $D --page-table texture
run tessera_old dun-old $D
run tessera dun-lod $D --shader-probe lod-only
run tessera dun-nolookup $D --shader-probe no-lookup
S="--scene stress512k --camera flyover --frames 60"
run tessera s512-buffer $S
run tessera s512-texture $S --page-table texture
fi
