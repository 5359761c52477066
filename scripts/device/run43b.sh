#!/bin/bash
# Issue 43's terrain table (run43.sh), and on an H200 also issue 45's whole table
# (run45f.sh), in one device call. Carry .gl and .bin.
# Run as: timeout 590 bash scripts/device/run43b.sh; tar czf $OUT/run43b.tgz -C /tmp r
bash scripts/device/run43.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "== an H200: issue 45's table"
  timeout 540 bash scripts/device/run45f.sh
fi
