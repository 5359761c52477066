#!/bin/bash
# Sourced by the device scripts (run41d.sh, run45.sh, run45b.sh; older ones inline it):
# unpacks the carried Vulkan loader (.gl/*.deb) and the release binary (.bin/tessera.xz,
# to /tmp/tessera, once per machine), points Vulkan at the NVIDIA driver and Tessera at
# the carried data (.bin/data), and makes /tmp/r (results) and /tmp/a (atlases). T is the
# binary. bench_1080p NAME ARGS...: one `tessera bench` at 1920x1080, 150 frames after 30
# warm-up, its table in /tmp/r/NAME.txt and JSON in /tmp/r/NAME.json, and its ratio and
# main rows printed. bench_floor NAME ARGS...: the same with the stride-8 probe and the
# pass without feedback (the floor), their rows printed. motion SUFFIX ARGS...: the demo
# flight and the cut camera on /tmp/a/photo.tsa with ARGS, their residency printed.
# bake_photos: the photograph baked LZ4 and ETC1S into /tmp/a/photo.tsa and
# photo-etc1s.tsa, once. motion_bc7 SUFFIX ARGS...: the cut and flyover cameras on
# photo-etc1s.tsa through a BC7 pool. burst NAME ARGS...: one `tessera bench` of the 16K²
# mosaic flown at 1080p with --upload-budget 1024 and 100 warm-up frames (add --codec and
# --flush-every). h200: 1 on an H200, else 0. h200_first and h200_last: on an H200 (unless
# H200_EXTRAS=0), issue 43's terrain table (run43.sh) and issue 45's table (run45f.sh), in
# the seconds left of the caller's `limit`.
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r /tmp/a && chmod 700 /tmp/xdg
[ -x /tmp/tessera ] || { xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"; chmod +x /tmp/tessera; }
T=/tmp/tessera
# 1 on an H200, where the tables the issues ask for are measured; 0 elsewhere.
h200=0
nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200 && h200=1
bench_1080p() { # name, then bench arguments
  local name=$1; shift
  timeout 90 $T bench "$@" --size 1920x1080 --frames 150 --warmup 30 --no-feedback-probe \
    --json /tmp/r/$name.json > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name (${SECONDS}s): $(grep -E '^ratio VT/reference' /tmp/r/$name.txt | head -1)"
  grep -E '^sampling|^virtual texturing|^reference|feedback CPU|upload bursts' /tmp/r/$name.txt | head -5
}
bench_floor() { # name, then bench arguments
  local name=$1; shift
  timeout 120 $T bench "$@" --size 1920x1080 --frames 150 --warmup 30 \
    --json /tmp/r/$name.json > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
  echo "== $name (${SECONDS}s)"
  grep -E '^ratio|^virtual texturing|^reference|^VT, ' /tmp/r/$name.txt
}
motion() { # suffix, then demo / capture arguments
  local s=$1; shift
  timeout 60 $T demo --size 1920x1080 "$@" --out /tmp/c/demo-$s > /tmp/r/demo-$s.txt 2>&1 || echo "FAILED demo-$s"
  echo "== demo-$s: $(grep -E 'fully resident \(every' /tmp/r/demo-$s.txt | head -1)"
  timeout 60 $T capture --atlas /tmp/a/photo.tsa --camera cut --frames 120 --size 1920x1080 "$@" \
    --out /tmp/c/cut-$s > /tmp/r/cut-$s.txt 2>&1 || echo "FAILED cut-$s"
  echo "== cut-$s: $(grep -E 'fully resident \(every|became fully resident|cut' /tmp/r/cut-$s.txt | head -2 | tr '\n' ' ')"
}
bake_photos() {
  [ -f /tmp/a/photo.tsa ] || $T bake .bin/data/bmng.jpg -o /tmp/a/photo.tsa > /dev/null 2>&1 \
    || echo "bake photo lz4 failed"
  [ -f /tmp/a/photo-etc1s.tsa ] || $T bake .bin/data/bmng.jpg --codec etc1s -o /tmp/a/photo-etc1s.tsa \
    > /dev/null 2>&1 || echo "bake photo etc1s failed"
}
motion_bc7() { # suffix, then capture arguments
  local s=$1; shift
  for cam in cut flyover; do
    timeout 60 $T capture --atlas /tmp/a/photo-etc1s.tsa --pool-format bc7 --camera $cam --frames 120 \
      --size 1920x1080 "$@" --out /tmp/c/$cam-bc7$s > /tmp/r/$cam-bc7$s.txt 2>&1 || echo "FAILED $cam-bc7$s"
    echo "== $cam-bc7$s: $(grep -E 'fully resident \(every|cut at' /tmp/r/$cam-bc7$s.txt | head -2 | tr '\n' ' ')"
  done
}
burst() { # name, then bench arguments
  local name=$1; shift
  # 150 s: the first ETC1S run bakes the mosaic (about 60 s on 16 cores).
  timeout 150 $T bench --scene mosaic16k --camera flyover --upload-budget 1024 "$@" --size 1920x1080 \
    --frames 150 --warmup 100 --no-feedback-probe --json /tmp/r/$name.json > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
}
h200_first() {
  [ $h200 = 1 ] && [ "${H200_EXTRAS:-1}" = 1 ] || return 0
  echo "== an H200: issue 43's terrain table first"
  timeout $((${limit:-585} - SECONDS)) bash scripts/device/run43.sh
}
h200_last() {
  [ $h200 = 1 ] && [ "${H200_EXTRAS:-1}" = 1 ] || return 0
  echo "== an H200: issue 45's table"
  timeout $((${limit:-585} - SECONDS)) bash scripts/device/run45f.sh
}
