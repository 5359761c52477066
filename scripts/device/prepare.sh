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
# h200: 1 on an H200, else 0.
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
