#!/usr/bin/env bash
# Packs what the device scripts carry, on a fresh checkout (both folders are git-ignored,
# so a new session has neither):
#   .gl/   the Vulkan loader and GL packages (Debian amd64 .debs; the device has the NVIDIA
#          driver but no loader), as ../.library/device/README.md says to fetch them;
#   .bin/  tessera.xz (stripped release build of tessera-cli), scene_bench.xz (the Bevy
#          benchmark, unless --no-bevy) and data/ (the images and levels the scripts use,
#          from assets/fetch-data.sh --dungeon --castle).
# Then, in a `run` with carry [".gl", ".bin"]: bash scripts/device/run47.sh (for example).
# Builds take ~15 min cold on 2 cores (tessera-cli) plus ~20 min (scene_bench).
set -euo pipefail
cd "$(dirname "$0")/../.."
bevy=1
[ "${1:-}" = --no-bevy ] && bevy=0
step() { echo "== $* (${SECONDS}s)"; }

step "1/4 Vulkan loader packages into .gl/"
if ! ls .gl/libvulkan1_*.deb > /dev/null 2>&1; then
  mkdir -p .gl /tmp/amd64/partial
  o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64)
  apt-get "${o[@]}" update -qq
  (cd .gl && apt-get "${o[@]}" download libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2)
fi
ls .gl

step "2/4 test data into .bin/data/"
data=$(assets/fetch-data.sh --dungeon --castle)
mkdir -p .bin/data
for f in bmng.jpg etopo1.jpg shadedrelief.jpg dungeon castle; do
  cp -a "$data/$f" .bin/data/
done

step "3/4 tessera (release, stripped) into .bin/tessera.xz"
CARGO_PROFILE_RELEASE_STRIP=true cargo build --release --locked -p tessera-cli
xz -6 -T2 -c target/release/tessera > .bin/tessera.xz

if [ "$bevy" = 1 ]; then
  step "4/4 scene_bench (release, stripped) into .bin/scene_bench.xz"
  (cd engine/bevy_tessera && CARGO_PROFILE_RELEASE_STRIP=true cargo build --release --locked \
    --ignore-rust-version --no-default-features --example scene_bench)
  xz -6 -T2 -c engine/bevy_tessera/target/release/examples/scene_bench > .bin/scene_bench.xz
fi
du -sh .gl .bin .bin/* | sed 's/^/  /'
step "done: carry .gl and .bin (64 MiB at most together)"
