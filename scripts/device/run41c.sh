#!/bin/bash
# Issue 31's upload bursts measured again after block pools gained their 4-texel margin
# (issue 41): pool flushed every 10 frames on the mosaic16k flyover, BC7 (ETC1S atlas)
# and RGBA8 (LZ4 atlas) at budget 1,024, merged copies against one copy per tile.
# Run after run41b.sh on the same machine (it unpacks .gl and the binary the same way).
# Run as: timeout 300 bash scripts/device/run41c.sh; tar czf $OUT/run41c.tgz -C /tmp r
set -u
for f in .gl/*.deb; do dpkg -x $f /; done; ldconfig
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json WGPU_BACKEND=vulkan \
  TESSERA_DATA=$PWD/.bin/data XDG_CACHE_HOME=/tmp/cache XDG_RUNTIME_DIR=/tmp/xdg
mkdir -p /tmp/xdg /tmp/r && chmod 700 /tmp/xdg
[ -x /tmp/tessera ] || { xz -dc .bin/tessera.xz > /tmp/tessera 2>/dev/null \
  || python3 -c "import lzma; open('/tmp/tessera','wb').write(lzma.open('.bin/tessera.xz').read())"; chmod +x /tmp/tessera; }
T=/tmp/tessera
for c in etc1s lz4; do
  [ $SECONDS -gt 240 ] && break
  timeout 120 $T capture --scene mosaic16k --codec $c --frames 2 --size 320x180 --out /tmp/warm > /dev/null 2>&1 || echo "bake $c failed"
  for copies in merged per-tile; do
    [ $SECONDS -gt 250 ] && break
    extra=; [ $copies = per-tile ] && extra=--per-tile-copies
    timeout 60 $T bench --scene mosaic16k --codec $c --camera flyover --flush-every 10 --upload-budget 1024 \
      --no-feedback-probe $extra --json /tmp/r/burst-$c-$copies.json > /tmp/r/burst-$c-$copies.txt 2>&1 || echo "FAILED burst $c $copies"
    echo "== burst $c $copies (${SECONDS}s)"; grep -iE "burst|upload CPU|copy commands|^virtual|^ratio" /tmp/r/burst-$c-$copies.txt | head -8
  done
done
