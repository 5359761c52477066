#!/usr/bin/env bash
# Sharded bake against the single-process bake of the same input (issue 27): the time of
# each shard, their sum against the single bake (the cost of every shard reading and
# filtering the whole image), both merges (split: the index over the parts; one file: the
# tiles copied) with the bytes each moved, and that the merged atlases equal the single one
# (the one-file merge byte for byte, the split one tile for tile through `tessera verify`
# and the tile CRCs of `tessera inspect --tiles`).
# With MOTO=1 the shards go to S3 instead: a moto server (PyPI `moto[server]`) on loopback,
# the parts uploaded by the shards and the split merge done there.
# Usage: scripts/shard-bench.sh [IMAGE | gen:WxH] [CODEC] [SHARDS]   (defaults: bmng.jpg etc1s 4)
set -euo pipefail
data=$(assets/fetch-data.sh)
src=${1:-$data/bmng.jpg}
codec=${2:-etc1s}
n=${3:-4}
bin=${TESSERA:-target/release/tessera}
if [[ "$src" == gen:* ]]; then input=(--generate "${src#gen:}"); else input=("$src"); fi
work=$(mktemp -d)
moto_pid=
cleanup() { [ -n "$moto_pid" ] && kill "$moto_pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
now() { date +%s.%N; }
out="$work/sharded.tsa"
if [ "${MOTO:-0}" = 1 ]; then
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  python3 -m moto.server -H 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  moto_pid=$!
  export AWS_ENDPOINT=http://127.0.0.1:$port AWS_ALLOW_HTTP=true AWS_ACCESS_KEY_ID=bench \
    AWS_SECRET_ACCESS_KEY=bench AWS_REGION=us-east-1
  for _ in $(seq 100); do python3 -c "import socket; socket.create_connection(('127.0.0.1',$port))" 2>/dev/null && break; sleep 0.1; done
  python3 -c "import boto3,os; boto3.client('s3', endpoint_url=os.environ['AWS_ENDPOINT']).create_bucket(Bucket='bench')"
  out="s3://bench/sharded.tsa"
fi
t0=$(now)
"$bin" bake "${input[@]}" --codec "$codec" -o "$work/single.tsa" >/dev/null
single=$(echo "$(now) - $t0" | bc)
sum=0
for i in $(seq 0 $((n - 1))); do
  s0=$(now)
  "$bin" bake "${input[@]}" --codec "$codec" -o "$out" --shard "$i/$n" --scratch-dir "$work" >/dev/null
  s=$(echo "$(now) - $s0" | bc)
  printf 'shard %d/%d: %.2f s\n' "$i" "$n" "$s"
  sum=$(echo "$sum + $s" | bc)
done
m0=$(now)
split_line=$("$bin" bake -o "$out" --merge | tail -1)
split=$(echo "$(now) - $m0" | bc)
"$bin" verify "$out" >/dev/null && verified=yes || verified=no
single_crcs=$("$bin" inspect "$work/single.tsa" --tiles | sort | md5sum)
split_crcs=$("$bin" inspect "$out" --tiles | sort | md5sum)
[ "$single_crcs" = "$split_crcs" ] && tiles_same=yes || tiles_same=no
printf 'input %s, codec %s, %d shards, %s cores, output %s\n' "$(basename "$src")" "$codec" "$n" "$(nproc)" "$out"
printf 'single bake %.2f s (%s bytes); shards sum %.2f s (%.1f%% of the single bake)\n' \
  "$single" "$(stat -c %s "$work/single.tsa")" "$sum" "$(echo "100 * $sum / $single" | bc -l)"
printf 'split merge %.2f s: %s\n  verify: %s; every tile (codec, length, CRC-32) as in the single bake: %s\n' \
  "$split" "$split_line" "$verified" "$tiles_same"
if [ "${MOTO:-0}" != 1 ]; then
  m0=$(now)
  one_line=$("$bin" bake -o "$out" --merge --one-file | tail -1)
  one=$(echo "$(now) - $m0" | bc)
  cmp "$work/single.tsa" "$out" && same=yes || same=no
  printf 'one-file merge %.2f s: %s\n  == single bake byte for byte: %s\n' "$one" "$one_line" "$same"
fi
