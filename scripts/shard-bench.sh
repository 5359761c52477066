#!/usr/bin/env bash
# Sharded bake against the single-process bake of the same image (issue 27): the time of
# each shard, their sum against the single bake (the cost of every shard reading and
# filtering the whole image), the merge, and that the merged atlas equals the single one.
# Usage: scripts/shard-bench.sh [IMAGE] [CODEC] [SHARDS] (defaults: bmng.jpg etc1s 4)
set -euo pipefail
data=$(assets/fetch-data.sh)
img=${1:-$data/bmng.jpg}
codec=${2:-etc1s}
n=${3:-4}
bin=${TESSERA:-target/release/tessera}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
now() { date +%s.%N; }
t0=$(now)
"$bin" bake "$img" --codec "$codec" -o "$work/single.tsa" >/dev/null
t1=$(now)
single=$(echo "$t1 - $t0" | bc)
sum=0
for i in $(seq 0 $((n - 1))); do
  s0=$(now)
  "$bin" bake "$img" --codec "$codec" -o "$work/sharded.tsa" --shard "$i/$n" >/dev/null
  s=$(echo "$(now) - $s0" | bc)
  printf 'shard %d/%d: %.2f s\n' "$i" "$n" "$s"
  sum=$(echo "$sum + $s" | bc)
done
m0=$(now)
"$bin" bake "$img" --codec "$codec" -o "$work/sharded.tsa" --merge >/dev/null
merge=$(echo "$(now) - $m0" | bc)
cmp "$work/single.tsa" "$work/sharded.tsa" && same=yes || same=no
printf 'image %s, codec %s, %d shards, %s cores\n' "$(basename "$img")" "$codec" "$n" "$(nproc)"
printf 'single bake %.2f s; shards sum %.2f s (%.1f%% of the single bake); merge %.2f s; merged == single: %s\n' \
  "$single" "$sum" "$(echo "100 * $sum / $single" | bc -l)" "$merge" "$same"
