#!/bin/bash
# The burst slice with its floor at 32 tiles a frame (16 before: at a camera cut on the
# 16K² mosaic, run54 found a BC7 pool held to 16 tiles a frame and resident 10 frames
# after the cut, against 2 with the slice off). One call, H100 or H200: the bursts
# against the same frames unflushed (run53.sh, the slice at its default and off), then
# the mosaic's cuts with and without prediction (run54.sh, the slice at its default and
# off). On an H200, run53.sh runs issue 43's terrain table first and issue 45's table
# (run45f.sh) after its bursts.
# Carry .gl and .bin. Run as: LIMIT=560 bash scripts/device/run55.sh > /tmp/r55.log 2>&1
limit=${LIMIT:-585}
source scripts/device/prepare.sh
SLICES="default off" LIMIT=$((limit - SECONDS)) bash scripts/device/run53.sh
H200_EXTRAS=0 timeout $((limit - SECONDS)) bash scripts/device/run54.sh
echo "done (${SECONDS}s)"
