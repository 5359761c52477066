#!/bin/bash
# Camera cuts that are real bursts, with the burst slice at its default (0.35 ms) and
# off: the photograph's cut (run52) uploads nothing at the cut, since the whole atlas
# fits the pool and prediction streams the view after the cut ahead of it. Here the
# 16K² mosaic (21,845 tiles) with the cut camera at 1080p, LZ4 -> RGBA8 and ETC1S -> BC7,
# with prediction (the default, --predict-frames 8) and without (--predict-frames 0: a
# cut nobody announced). Frames until fully resident after the cut, and the tiles
# uploaded in the frames after it.
# On an H200, issue 43's terrain table first and issue 45's table (run45f.sh) last.
# CODECS (lz4 etc1s) and PREDICT (8 0) choose the rows.
# Carry .gl and .bin. Run as: LIMIT=560 bash scripts/device/run54.sh > /tmp/r54.log 2>&1
limit=${LIMIT:-585}
source scripts/device/prepare.sh
nproc; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
h200_first
for c in ${CODECS:-lz4 etc1s}; do
  for p in ${PREDICT:-8 0}; do
    for s in default off; do
      name=cut-$c-p$p-$s
      opt=(); [ $s = off ] && opt=(--upload-slice-ms off)
      # 150 s: the first ETC1S capture bakes the mosaic (about 60 s on 16 cores).
      timeout 150 $T capture --scene mosaic16k --codec $c --camera cut --frames 120 --size 1920x1080 \
        --predict-frames $p "${opt[@]}" --out /tmp/c/$name > /tmp/r/$name.txt 2>&1 || echo "FAILED $name"
      cp /tmp/c/$name/stats.json /tmp/r/$name-stats.json 2>/dev/null
      echo "== $name (${SECONDS}s): $(grep -E 'fully resident \(every|cut at' /tmp/r/$name.txt | head -2 | tr '\n' ' ')"
      python3 - /tmp/r/$name-stats.json <<'PY' || true
import json, sys
f = json.load(open(sys.argv[1]))['frames']
after = [x for x in f if x['frame'] >= 30][:12]
print('   frames 30..41: uploads', [x.get('uploads', 0) for x in after],
      'cap', [x.get('upload_slice_tiles') for x in after],
      'resident', [round(x['resident_fraction'], 2) for x in after])
PY
    done
  done
done
echo "cuts done (${SECONDS}s)"
h200_last
echo "done (${SECONDS}s)"
