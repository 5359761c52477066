#!/bin/bash
# Bake at scale (issue 26): the baker against the encode-only ceiling on the H200 host's
# 16 cores, the pipelined baker (.bin/tessera-new.xz) and the one before it
# (.bin/tessera-old.xz: the same commit with the row-parallel baker) in one run.
# Carry .bin (stripped release builds, xz; .bin/data/shadedrelief.jpg from assets/fetch-data.sh).
# Usage: scripts/device/run26.sh relief | single | generated (the second run was 'single; generated')
set -u
for b in old new; do
  xz -dc .bin/tessera-$b.xz > /tmp/tessera-$b 2>/dev/null \
    || python3 -c "import lzma,sys; open('/tmp/tessera-$b','wb').write(lzma.open('.bin/tessera-$b.xz').read())"
  chmod +x /tmp/tessera-$b
done
img=.bin/data/shadedrelief.jpg
nproc; grep -m1 'model name' /proc/cpuinfo
case "${1:-relief}" in
relief)
  /tmp/tessera-new bake-bench $img --codecs lz4,etc1s,uastc --threads 1,4,16 --skip-single-bake \
    --ceiling-every 4 --json $OUT/relief-new.json --work-dir /tmp/work 2>&1 | tee $OUT/relief-new.txt
  /tmp/tessera-old bake-bench $img --codecs lz4,etc1s,uastc --threads 4,16 \
    --ceiling-every 8 --json $OUT/relief-old.json --work-dir /tmp/work 2>&1 | tee $OUT/relief-old.txt
  ;;
single)
  /tmp/tessera-new bake-bench $img --crop 4096x2048 --codecs lz4,etc1s,uastc --threads 1,16 \
    --json $OUT/single-new.json --work-dir /tmp/work 2>&1 | tee $OUT/single-new.txt
  /tmp/tessera-old bake-bench $img --codecs uastc --threads 16 \
    --ceiling-every 8 --json $OUT/relief-old-uastc.json --work-dir /tmp/work 2>&1 | tee $OUT/relief-old-uastc.txt
  ;;
generated)
  for n in 16384; do
    python3 -c "import resource,subprocess,sys,time; t=time.time(); subprocess.run(sys.argv[1:]); \
print('wall_s', round(time.time()-t, 2), 'peak_rss_kib', resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)" \
      /tmp/tessera-new bake --generate ${n}x${n} --codec etc1s -o /tmp/work/gen.tsa 2>&1 | tee -a $OUT/generated.txt
  done
  ;;
esac
