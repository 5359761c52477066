#!/bin/bash
# Issue 45 bursts against the same frames unflushed (after run52, H100, 2026-12-07: the
# bench's idle baseline is a few frames at other views, 0.76-1.0 ms from run to run).
# For each pool (LZ4 -> RGBA8, ETC1S -> BC7), the 16K² mosaic flyover at 1080p,
# --upload-budget 1024, 100 warm-up frames: once without flushes (the baseline), then
# --flush-every 10 with the slice at its default (0.35 ms), at 0.3 ms and off;
# scripts/device/burst_cost.py compares each burst frame with the same frame unflushed.
# On an H200, issue 43's terrain table first and issue 45's table (run45f.sh) last.
# SLICES (default 0.3 off) chooses the rows.
# Carry .gl and .bin. Run as: LIMIT=560 bash scripts/device/run53.sh > /tmp/r53.log 2>&1
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
for c in lz4 etc1s; do
  burst warm-$c --codec $c
  for s in ${SLICES:-default 0.3 off}; do
    opt=(); [ $s != default ] && opt=(--upload-slice-ms $s)
    burst burst-$c-$s --codec $c --flush-every 10 "${opt[@]}"
    echo "== burst-$c-$s (${SECONDS}s)"
    grep -E 'over the idle|upload bursts' /tmp/r/burst-$c-$s.txt
    python3 scripts/device/burst_cost.py /tmp/r/burst-$c-$s.json /tmp/r/warm-$c.json
  done
done
echo "bursts done (${SECONDS}s)"
h200_last
echo "done (${SECONDS}s)"
