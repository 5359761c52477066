#!/bin/bash
# Issue 45 with the new defaults (the burst slice on, 0.35 ms, after run51 on an H100,
# 2026-12-07), one call: issue 45's table (the floors: the pass without feedback and
# the stride-8 probe, on the photograph RGBA8 and BC7, 4x anisotropy, the 16K² mosaic
# RGBA8 and BC7, the lit dungeon), then bursts with the default against
# --upload-slice-ms off (100 warm-up frames: in run49 and run50 the GPU ran slow for
# the first 20-25 measured frames of some runs), each burst frame also against the same
# frame of a run without flushes (burst_cost.py), then motion with the defaults.
# On an H200, issue 43's terrain table first. Carry .gl and .bin.
# Run as: LIMIT=560 bash scripts/device/run52.sh > /tmp/r52.log 2>&1; tar czf $OUT/run52.tgz -C /tmp r
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
bake_photos
bench_floor photo --atlas /tmp/a/photo.tsa --camera flyover
bench_floor photo-bc7 --atlas /tmp/a/photo-etc1s.tsa --camera flyover
bench_floor photo-aniso4 --atlas /tmp/a/photo.tsa --camera flyover --aniso 4
bench_floor mosaic --scene mosaic16k --camera flyover
bench_floor mosaic-bc7 --scene mosaic16k --codec etc1s --camera flyover
bench_floor dungeon --scene dungeon --codec etc1s
echo "floors done (${SECONDS}s)"
for c in lz4 etc1s; do
  for s in warm default off; do
    name=burst-$c-$s
    opt=(--flush-every 10); [ $s = off ] && opt+=(--upload-slice-ms off); [ $s = warm ] && opt=()
    burst $name --codec $c "${opt[@]}"
    [ $s = warm ] && continue
    echo "== $name (${SECONDS}s)"
    grep -E 'over the idle|burst, median|upload bursts|uploads per frame' /tmp/r/$name.txt
    python3 scripts/device/burst_cost.py /tmp/r/$name.json /tmp/r/burst-$c-warm.json
  done
done
echo "bursts done (${SECONDS}s)"
motion default
motion_bc7 ""
echo "done (${SECONDS}s)"
