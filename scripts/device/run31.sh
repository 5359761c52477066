#!/bin/bash
# Paced cut (issue 31 item 3): the upload budget controller filling the room a frame
# leaves below --target-frame-ms, against the fixed budget, BC7 and RGBA8 pools; per-frame
# figures (frames over 8.5 ms, frames from the cut to 100% resident) are in the JSON.
# Carry .gl, .bin/tessera.xz and .bin/data as for run30.sh.
# Run as: timeout 560 bash scripts/device/run31.sh; tar czf $OUT/run31.tgz -C /tmp r
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r && chmod 700 /tmp/xdg
xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"
chmod +x /tmp/tessera
T=/tmp/tessera
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for c in etc1s lz4; do
  $T capture --scene mosaic16k --codec $c --frames 2 --size 320x180 --out /tmp/warm > /dev/null 2>&1 || echo "bake $c failed"
done
for c in etc1s lz4; do
  for mode in paced fixed; do
    pace=; [ $mode = paced ] && pace="--target-frame-ms 8"
    timeout 120 $T bench --scene mosaic16k --codec $c --camera cut --frames 60 --warmup 30 --no-feedback-probe \
      --upload-budget 1024 $pace --json /tmp/r/cut-$c-$mode.json > /tmp/r/cut-$c-$mode.txt 2>&1 || echo "FAILED $c $mode"
    echo "== cut $c $mode (${SECONDS}s)"; grep -E "^virtual|^ratio|upload CPU" /tmp/r/cut-$c-$mode.txt
  done
done
# Motion quality on the mosaic16k flyover (issue 31's second scene), prediction off and at
# the default 8 frames, same run: frames fully resident and the coarser-pixel share.
for p in 0 8; do
  timeout 120 $T capture --scene mosaic16k --camera flyover --frames 180 --size 1920x1080 \
    --predict-frames $p --out /tmp/c/fly-$p > /tmp/r/fly-$p.txt 2>&1 || echo "FAILED flyover predict $p"
  mkdir -p /tmp/r/fly-$p && cp /tmp/c/fly-$p/*.json /tmp/r/fly-$p/ 2>/dev/null
  echo "== mosaic16k flyover predict $p (${SECONDS}s)"; grep -vE "^adapter|written to" /tmp/r/fly-$p.txt | head -8
done
