#!/bin/bash
# Issue 45 item 4: the Bevy plugin on a second level. scene_bench, streamed through
# bevy_tessera against the same texels resident in StandardMaterial, at 1920x1080, still
# and walk, with and without a DepthPrepass, on the castle (castle-game-engine-doc's
# simple_3d_demo level: 8,318 triangles, 11 PNG textures, assets/fetch-data.sh --castle)
# and on the dungeon (the earlier rows' level) in the same run. 120 warm-up and FRAMES
# (600) measured frames per row; one JSON line per row in /tmp/r/scene_bench.jsonl, and
# streamed / resident GPU ratios at the end.
# Since a92a9c6 a small atlas' pool is only as large as its whole mip chain (the castle's
# 1024² stack: 29 MiB, not the 64 asked), so texture_bytes is what it takes.
# Carry .gl and .bin: scene_bench.xz (in engine/bevy_tessera:
#   CARGO_PROFILE_RELEASE_STRIP=true cargo build --release --ignore-rust-version --no-default-features --example scene_bench
#   then xz -6 -T2 -c target/release/examples/scene_bench > ../../.bin/scene_bench.xz), tessera.xz
# (prepare.sh unpacks it; this script does not use it), data/dungeon and data/castle. Each
# row is one process (start, 120 warm-up frames, then the measured ones); rows not started
# by 480 s are skipped and say so.
# Run as: timeout 540 bash scripts/device/run45c.sh; tar czf $OUT/run45c.tgz -C /tmp r
# PREPASS_ONLY=1: only the rows with a DepthPrepass. LEVELS="dungeon": only those levels.
# LOCAL=1 SIZE=160x90 FRAMES=3 runs the same rows here (software Vulkan), without prepare.sh.
if [ "${LOCAL:-0}" = 1 ]; then
  set -u
  SB=${SB:-engine/bevy_tessera/target/release/examples/scene_bench}
  export TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=${XDG_CACHE_HOME:-/tmp/run45c-cache}
  mkdir -p /tmp/r
else
  source scripts/device/prepare.sh
  nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  [ -x /tmp/scene_bench ] || { xz -dc .bin/scene_bench.xz > /tmp/scene_bench 2>/dev/null \
    || python3 -c "import lzma; open('/tmp/scene_bench','wb').write(lzma.open('.bin/scene_bench.xz').read())"; \
    chmod +x /tmp/scene_bench; }
  SB=/tmp/scene_bench
fi
size=${SIZE:-1920x1080}
frames=${FRAMES:-600}
level_args() { # level name -> scene_bench arguments
  case $1 in
    dungeon) ;;
    castle) echo "--gltf $TESSERA_DATA/castle/castle.gltf" ;;
  esac
}
rm -f /tmp/r/scene_bench.jsonl
for level in ${LEVELS:-castle dungeon}; do
  # The first run bakes the level's atlas into $XDG_CACHE_HOME (not timed).
  $SB $(level_args $level) --textures streamed --camera still --frames 2 --size 320x180 > /dev/null 2>/tmp/r/bake-$level.txt \
    || { echo "bake run of $level failed"; tail -3 /tmp/r/bake-$level.txt; }
  echo "== $level baked (${SECONDS}s)"
done
if [ -n "${PREPASS_ONLY:-}" ]; then prepasses=(--prepass); else prepasses=("" --prepass); fi
for level in ${LEVELS:-castle dungeon}; do
  for camera in still walk; do
    for prepass in "${prepasses[@]}"; do
      for textures in resident streamed; do
        if [ "$SECONDS" -gt 480 ]; then echo "skipped $level $camera ${prepass:-no-prepass} $textures: out of time"; continue; fi
        name=$level-$camera${prepass:+-prepass}-$textures
        line=$(timeout 90 $SB $(level_args $level) --textures $textures --camera $camera --frames $frames --size $size $prepass \
          2>/tmp/r/$name.err | tail -1)
        if [ "${line:0:1}" = "{" ]; then
          echo "$line" >> /tmp/r/scene_bench.jsonl
          echo "$line"
        else
          echo "FAILED $name (${SECONDS}s)"; tail -3 /tmp/r/$name.err
        fi
      done
    done
  done
done
echo "== rows done (${SECONDS}s)"
# Streamed / resident GPU time per level, camera and prepass.
python3 - /tmp/r/scene_bench.jsonl <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
runs = {}
for r in rows:
    level = "castle" if "castle" in r["level"] else r["level"]
    runs[(level, r["camera"], r["prepass"], r["textures"])] = r
print("level camera prepass | resident GPU ms (opaque + prepass) | streamed GPU ms (opaque + prepass) | streamed/resident | texture MiB res/str | uploads")
for (level, camera, prepass, textures), s in sorted(runs.items()):
    r = runs.get((level, camera, prepass, "resident"))
    if textures != "streamed" or r is None:
        continue
    f = lambda d: f'{d["gpu_ms_median"]} ({d["opaque_pass_gpu_ms_median"]} + {d["prepass_gpu_ms_median"]}), p95 {d["gpu_ms_p95"]}'
    ratio = s["gpu_ms_median"] / r["gpu_ms_median"] if s["gpu_ms_median"] and r["gpu_ms_median"] else float("nan")
    mib = lambda d: d["texture_bytes"] / 2**20
    print(f'{level} {camera} {"prepass" if prepass else "no-prepass"} | {f(r)} | {f(s)} | {ratio:.2f}x | '
          f'{mib(r):.1f}/{mib(s):.1f} | {s["uploads"]} (resident fraction {s["mean_resident_fraction"]})')
PY
echo "done (${SECONDS}s)"
