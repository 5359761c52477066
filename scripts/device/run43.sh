#!/bin/bash
# Issue 43: the runtime-virtual-texture terrain against its composite evaluated per pixel
# (`tessera bench --scene terrain|terrain8`, the reference rows), walking and flying, at
# 1080p; then a camera cut (tiles drawn at the cut, frames until fully resident). Carry
# .gl and .bin (the release binary and .bin/data with etopo1.jpg, dungeon/, castle/).
# Run as: timeout 400 bash scripts/device/run43.sh; tar czf $OUT/run43.tgz -C /tmp r
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for scene in terrain terrain8; do
  for cam in walk fly; do
    bench_1080p $scene-$cam --scene $scene --camera $cam
    grep -A4 '^runtime virtual texture' /tmp/r/$scene-$cam.txt
  done
done
timeout 90 $T capture --scene terrain --camera cut --frames 120 --size 1920x1080 --out /tmp/c/cut \
  > /tmp/r/cut.txt 2>&1 || echo "FAILED cut"
grep -E 'fully resident|cut at' /tmp/r/cut.txt
cp /tmp/c/cut/stats.json /tmp/r/cut-stats.json 2>/dev/null
python3 - <<'PY' || echo "no cut summary"
import json
f = json.load(open('/tmp/r/cut-stats.json'))['frames']
after = [x for x in f if x['frame'] >= 30]
drawn, frames = 0, None
for x in after:
    drawn += x.get('produced', 0) + x.get('refreshed', 0)
    if x['resident_fraction'] >= 1.0 and (x.get('feedback_frame') or 0) >= 30:
        frames = x['frame'] - 30
        break
print(f"cut at frame 30: {drawn} tiles drawn until fully resident after {frames} frame(s)")
PY
echo "done (${SECONDS}s)"
