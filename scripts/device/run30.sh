#!/bin/bash
# Render cost (issue 30): the complete page table (one load, updated on the GPU) against
# the shallow one (fallbacks 4 mips deep, the shader climbing past them), same binary,
# same machine, one run: VT pass / fully resident reference per scene, the probe
# breakdown, per-frame CPU at 16384² and 524288², and feedback through a colour target
# (the default) against the storage bitset.
# Carry .gl, .bin/tessera.xz (CARGO_PROFILE_RELEASE_STRIP=true cargo build --release
# -p tessera-cli; xz -9) and .bin/data (shadedrelief.jpg, bmng.jpg, etopo1.jpg, dungeon/
# from assets/fetch-data.sh --dungeon).
# Run as: timeout 570 bash scripts/device/run30.sh; tar czf $OUT/run30.tgz -C /tmp r
# (the rows are ordered by importance, so a run cut short still returns the first ones).
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg && chmod 700 /tmp/xdg
xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"
chmod +x /tmp/tessera
T=/tmp/tessera
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Bake the scenes first (not timed): one short capture each.
for s in "mosaic16k lz4" "mosaic16k etc1s" "dungeon etc1s" "stress512k lz4"; do
  set -- $s
  $T capture --scene $1 --codec $2 --frames 2 --size 320x180 --out /tmp/warm > /dev/null 2>&1 || echo "bake $1 $2 failed"
done
# A photograph (10800x5400 shaded relief) as an RGBA8 and a BC7 pool.
for c in lz4 etc1s; do
  $T bake .bin/data/shadedrelief.jpg --codec $c -o /tmp/photo-$c.tsa > /dev/null 2>&1 || echo "bake photo $c failed"
done
mkdir -p /tmp/r
b() { # name, page-table storages, then bench arguments
  local name=$1 pts=$2; shift 2
  for pt in $pts; do
    timeout 240 $T bench "$@" --page-table $pt --frames ${FRAMES:-180} --warmup 30 \
      --json /tmp/r/$name-$pt.json > /tmp/r/$name-$pt.txt 2>&1 || echo "FAILED $name $pt"
    echo "== $name $pt (${SECONDS}s)"; grep -E "^virtual|^reference|^ratio|feedback CPU|upload CPU|page-table|bursts" /tmp/r/$name-$pt.txt
  done
}
b flyover "complete buffer" --scene mosaic16k --camera flyover --no-feedback-probe
b orbit "complete buffer" --scene mosaic16k --camera orbit --no-feedback-probe
b dungeon "complete buffer" --scene dungeon --codec etc1s --camera walk --no-feedback-probe
b aniso4 "complete buffer" --scene mosaic16k --camera flyover --no-feedback-probe --aniso 4
b bc7 "complete buffer" --scene mosaic16k --codec etc1s --camera flyover --no-feedback-probe
# BC7 pools on the hardware path (level 1 encoded on the GPU) against the software blend.
b bc7-software complete --scene mosaic16k --codec etc1s --camera flyover --no-feedback-probe --trilinear software
b photo "complete buffer" --atlas /tmp/photo-lz4.tsa --camera flyover --no-feedback-probe
b photo-bc7 "complete buffer" --atlas /tmp/photo-etc1s.tsa --camera flyover --no-feedback-probe
for p in lod-only lookup-only no-lookup; do
  b flyover-$p complete --scene mosaic16k --camera flyover --no-feedback-probe --shader-probe $p
done
b stress512k "complete buffer" --scene stress512k --camera flyover --no-feedback-probe
# Feedback through the storage bitset (the rows above write a colour target): with the
# depth test forced early, and without (what a renderer that cannot force it gets).
b flyover-storage complete --scene mosaic16k --camera flyover --no-feedback-probe --feedback storage
b dungeon-storage complete --scene dungeon --codec etc1s --camera walk --no-feedback-probe --feedback storage
b dungeon-storage-late complete --scene dungeon --codec etc1s --camera walk --no-feedback-probe \
  --feedback storage --no-early-depth
# Motion quality (issue 31): the demo's fully resident frames and blurry-pixel share.
for run in "target 8" "target 0" "storage 8" "target 16"; do
  set -- $run
  timeout 120 $T demo --size 1920x1080 --feedback $1 --predict-frames $2 --out /tmp/d/demo-$1-$2 > /dev/null 2>&1 \
    || echo "FAILED demo $1 $2"
  mkdir -p /tmp/r/demo-$1-$2 && cp /tmp/d/demo-$1-$2/*.md /tmp/d/demo-$1-$2/*.json /tmp/r/demo-$1-$2/
  echo "== demo feedback $1 predict $2"; grep -E "fully resident \(|coarser" /tmp/r/demo-$1-$2/report.md
done
# Upload bursts (issue 31): the pool flushed every 10 frames, host cache kept; runs of
# slots in one copy (the default) against one copy per tile.
for copies in merged per-tile; do
  c=; [ $copies = per-tile ] && c=--per-tile-copies
  b burst-bc7-1024-$copies complete --scene mosaic16k --codec etc1s --camera flyover --flush-every 10 --upload-budget 1024 --no-feedback-probe $c
  b burst-rgba8-256-$copies complete --scene mosaic16k --camera flyover --flush-every 10 --upload-budget 256 --no-feedback-probe $c
  b burst-rgba8-1024-$copies complete --scene mosaic16k --camera flyover --flush-every 10 --upload-budget 1024 --no-feedback-probe $c
done
# A paced cut: 8 ms frame target against the fixed budget (per-frame figures in the JSON).
for c in etc1s lz4; do
  FRAMES=60 b cut-$c-paced complete --scene mosaic16k --codec $c --camera cut --no-feedback-probe --target-frame-ms 8 --upload-budget 1024
  FRAMES=60 b cut-$c-fixed complete --scene mosaic16k --codec $c --camera cut --no-feedback-probe --upload-budget 1024
done
b bc7-uastc complete --scene mosaic16k --codec uastc --camera flyover --no-feedback-probe
tar czf $OUT/run30.tgz -C /tmp r
