#!/bin/bash
# One device call for this session's open figures. On an H200: issue 43's terrain table
# (run43.sh, ~20 s) and issue 45's whole table (run45f.sh, <= 540 s). On an H100 (the
# H100 tables are in BENCHMARKS.md already): the Bevy rows of issue 45 item 4 again
# (run45c.sh, 300 frames a row), for the prepass in plain WGSL with early depth forced.
# Carry .gl and .bin (tessera.xz, scene_bench.xz, data/).
# Run as: timeout 590 bash scripts/device/run47.sh; tar czf $OUT/run47.tgz -C /tmp r
# LIMIT (default 585) is the seconds the whole script may take: the terrain table comes
# first, and issue 45's table or the Bevy rows get what is left.
limit=${LIMIT:-585}
mkdir -p /tmp/r
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "== an H200: issue 43's terrain table, then issue 45's table"
  bash scripts/device/run43.sh
  timeout $((limit - SECONDS)) bash scripts/device/run45f.sh
else
  echo "== not an H200: the Bevy prepass rows (run45c.sh)"
  LEVELS=${LEVELS:-castle dungeon} PREPASS_ONLY=${PREPASS_ONLY:-} FRAMES=300 timeout $((limit - SECONDS)) bash scripts/device/run45c.sh
fi
