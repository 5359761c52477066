#!/usr/bin/env bash
# Installs the Rust toolchain that builds Tessera for the browser (wasm32-unknown-unknown)
# on Debian 12, where rustup has only the host target: Debian's rustc-web and cargo-web
# (from bookworm-security), the standard library's sources (rust-web-src, for
# -Zbuild-std) and LLVM's wasm-ld, unpacked into a folder of their own (never installed
# beside rustup's rustc in /usr/bin). Idempotent: a second run checks and does nothing.
#
#   scripts/web-toolchain.sh [--wasm-bindgen] [--check]
#   source "${TESSERA_WEB_TOOLCHAIN:-$HOME/.cache/tessera/web-toolchain}/env.sh"
#   cargo build -p tessera-vt-core --no-default-features --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort
#
# env.sh puts the web cargo and rustc first on PATH in the shell that sources it only, and
# builds into target/web (another rustc: the native target/ stays as it is).
# TESSERA_WEB_TOOLCHAIN: the folder (default ~/.cache/tessera/web-toolchain, ~0.5 GB).
# --wasm-bindgen: also builds wasm-bindgen-cli, at the version of the wasm-bindgen crate
# in Cargo.lock, with the native cargo, into the folder's bin/ (wasm-bindgen, and
# wasm-bindgen-test-runner for scripts/web-core-tests).
# --check: builds the check module (a cdylib for wasm32, run by node when there is one)
# again; otherwise it is built once per installed toolchain.
set -euo pipefail

dir=${TESSERA_WEB_TOOLCHAIN:-$HOME/.cache/tessera/web-toolchain}
repo=$(cd "$(dirname "$0")/.." && pwd)
bindgen=0 recheck=0
for arg in "$@"; do
  case "$arg" in
    --wasm-bindgen) bindgen=1 ;;
    --check) recheck=1 ;;
    -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "web-toolchain: unknown argument '$arg' (see --help)" >&2; exit 2 ;;
  esac
done

# The oldest rustc the workspace builds with (rust-version in Cargo.toml).
min_rust=1.95
security_hint="rustc-web, rust-web-src, libllvmNN and lld-NN come from Debian 12's security archive: add
  deb http://deb.debian.org/debian-security bookworm-security main
to /etc/apt/sources.list (or 'bookworm-security' to Suites: in /etc/apt/sources.list.d/debian.sources), then run apt-get update"

step() { echo "web-toolchain: $*"; }
die() { echo "web-toolchain: error: $*" >&2; exit 1; }

for tool in apt-get apt-cache dpkg dpkg-deb; do
  command -v "$tool" >/dev/null 2>&1 || die "$tool not found: this script needs Debian 12 (bookworm) with apt"
done
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
log="$dir/last-run.log"
: > "$log"
if command -v flock >/dev/null 2>&1; then
  exec 9> "$dir/.lock"
  flock 9
fi

candidate() { # the version apt would install of package $1, or nothing
  apt-cache show --no-all-versions "$1" 2>/dev/null | sed -n 's/^Version: //p' | head -n 1 || true
}

updated=0
apt_update() { # once per run; needs root (or sudo)
  ((updated)) && return 1
  updated=1
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || { echo "web-toolchain: apt-get update needs root; run it, then re-run this script" >&2; return 1; }
    sudo=(sudo)
  fi
  step "apt-get update (a package was missing or could not be downloaded)"
  "${sudo[@]}" apt-get update -qq >> "$log" 2>&1 || { echo "web-toolchain: apt-get update failed (see $log)" >&2; return 1; }
}

# Fills `wanted` with package=version lines; returns 1 with `problem` set when one is missing.
resolve() {
  wanted=() problem=""
  local rust minor llvm p v found
  rust=$(candidate rustc-web)
  if [ -z "$rust" ] || dpkg --compare-versions "$rust" lt "$min_rust"; then
    problem="rustc-web $min_rust or newer is not in the archives apt knows (candidate: ${rust:-none}). $security_hint"
    return 1
  fi
  minor=$(echo "$rust" | grep -oE '^[0-9]+\.[0-9]+')
  llvm=$(apt-cache show --no-all-versions "libstd-rust-web-$minor" 2>/dev/null | sed -n 's/^Depends: //p' | grep -oE 'libllvm[0-9]+' | head -n 1 || true)
  [ -n "$llvm" ] || { problem="libstd-rust-web-$minor (rustc-web $rust's standard library) not found. $security_hint"; return 1; }
  llvm=${llvm#libllvm}
  # cargo-web links libgit2 1.5, which needs libhttp-parser, libssh2 and mbed TLS (Debian 12 main).
  local pkgs=(rustc-web cargo-web rust-web-src rust-web-clippy "libstd-rust-web-$minor" libstd-rust-web-dev
    "libllvm$llvm" "lld-$llvm" libgit2-1.5 libhttp-parser2.9 libssh2-1 libmbedcrypto7 libmbedtls14 libmbedx509-1)
  # One apt-cache call for all (each takes most of a second).
  found=$(apt-cache show --no-all-versions "${pkgs[@]}" 2>/dev/null |
    awk '/^Package: / { p = $2 } /^Version: / { print p "=" $2 }' || true)
  for p in "${pkgs[@]}"; do
    v=$(echo "$found" | awk -F= -v p="$p" '$1 == p { print substr($0, length(p) + 2); exit }')
    if [ -z "$v" ]; then
      case "$p" in
        lib*-rust-web-* | rust-web-* | rustc-web | cargo-web | libllvm* | lld-*) problem="package $p not found. $security_hint" ;;
        *) problem="package $p not found: it comes from Debian 12 (bookworm) main; enable that archive and run apt-get update" ;;
      esac
      return 1
    fi
    case "$p" in rust-web-* | rustc-web | cargo-web | lib*-rust-web-*)
      [ "$v" = "$rust" ] || { problem="$p $v does not match rustc-web $rust (run apt-get update)"; return 1; } ;;
    esac
    wanted+=("$p=$v")
  done
  llvm_major=$llvm
}

step "1/5 resolving packages"
if ! resolve; then
  apt_update || die "$problem"
  resolve || die "$problem"
fi
root="$dir/root"
stamp="$root/.tessera-packages"
want_list=$(printf '%s\n' "${wanted[@]}")

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want_list" ]; then
  step "2/5 downloading: up to date (rustc-web ${wanted[0]#*=})"
  step "3/5 unpacking: up to date"
else
  step "2/5 downloading ${#wanted[@]} packages (~150 MB) with apt-get download"
  debs="$dir/debs"
  mkdir -p "$debs"
  download() {
    local pv p v f missing=()
    for pv in "${wanted[@]}"; do
      p=${pv%%=*} v=${pv#*=}
      # Debian file names write an epoch's colon as %3a.
      f="$debs/${p}_${v//:/%3a}_"
      compgen -G "$f*.deb" >/dev/null || missing+=("$pv")
    done
    ((${#missing[@]})) || return 0
    (cd "$debs" && apt-get download "${missing[@]}") >> "$log" 2>&1
  }
  if ! download; then
    apt_update || die "apt-get download failed (see $log)"
    resolve || die "$problem"
    download || die "apt-get download failed after apt-get update: $(grep -E '^E:' "$log" | tail -n 3 | tr '\n' ' ')(full output: $log)"
  fi

  step "3/5 unpacking with dpkg -x"
  rm -rf "$root.new"
  mkdir -p "$root.new"
  for pv in "${wanted[@]}"; do
    p=${pv%%=*} v=${pv#*=}
    dpkg -x "$(compgen -G "$debs/${p}_${v//:/%3a}_*.deb" | head -n 1)" "$root.new"
  done
  src=$(compgen -G "$root.new/usr/src/rustc-*" | head -n 1) || die "rust-web-src unpacked no usr/src/rustc-* folder"
  # -Zbuild-std reads library/ only: the compiler's sources and the books are 365 MB.
  rm -rf "$src/src" "$src/compiler" "$root.new/usr/share/doc" "$root.new/usr/share/man"
  # rustc finds the sources at <sysroot>/lib/rustlib/src/rust (rust-web-src ships the link).
  rustsrc="$root.new/usr/lib/rustlib/src/rust"
  if [ ! -e "$rustsrc/library/Cargo.lock" ]; then
    mkdir -p "$(dirname "$rustsrc")"
    ln -sfn "../../../src/$(basename "$src")" "$rustsrc"
  fi
  [ -e "$rustsrc/library/Cargo.lock" ] || die "the standard library's sources are missing at $rustsrc/library"
  echo "$want_list" > "$root.new/.tessera-packages"
  rm -rf "$root"
  mv "$root.new" "$root"
  rm -rf "$debs"
fi

libdir=$(dirname "$(compgen -G "$root/usr/lib/*/librustc_driver-*.so" | head -n 1)")
llvm_bin="$root/usr/lib/llvm-$llvm_major/bin"
[ -x "$root/usr/bin/rustc" ] && [ -x "$root/usr/bin/cargo" ] && [ -x "$llvm_bin/wasm-ld" ] ||
  die "the unpacked toolchain in $root lacks rustc, cargo or wasm-ld; remove $root and re-run"

step "4/5 writing $dir/env.sh"
cat > "$dir/env.sh.new" << EOF
# Written by scripts/web-toolchain.sh. Source it in a shell that builds Tessera for the
# browser: Debian's rustc-web and cargo-web come first on PATH in that shell only.
#   cargo build -p tessera-vt-core --no-default-features --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort
export PATH="$dir/bin:$root/usr/bin:$llvm_bin:\$PATH"
export LD_LIBRARY_PATH="$libdir\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export RUSTC="$root/usr/bin/rustc" RUSTDOC="$root/usr/bin/rustdoc"
# -Zbuild-std on a stable release: the wasm32 standard library is built from rust-web-src.
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER=wasm-ld
# Another rustc than rustup's: its own target folder, so the native target/ stays valid.
export CARGO_TARGET_DIR="\${CARGO_TARGET_DIR:-\$(git rev-parse --show-toplevel 2>/dev/null || pwd)/target/web}"
EOF
mv "$dir/env.sh.new" "$dir/env.sh"

if ((bindgen)); then
  version=$(awk '/^name = "wasm-bindgen"$/ { getline; gsub(/version = |"/, ""); print; exit }' "$repo/Cargo.lock")
  [ -n "$version" ] || die "no wasm-bindgen crate in $repo/Cargo.lock"
  if [ "$("$dir/bin/wasm-bindgen" --version 2>/dev/null)" = "wasm-bindgen $version" ] &&
    [ "$("$dir/bin/wasm-bindgen-test-runner" --version 2>/dev/null)" = "wasm-bindgen-test-runner $version" ]; then
    step "    wasm-bindgen-cli $version: up to date"
  else
    step "    building wasm-bindgen-cli $version with the native cargo (minutes)"
    # Its own Cargo.lock first; when the registry lacks a version locked there, a fresh resolve.
    cargo install -q --locked wasm-bindgen-cli --version "=$version" --root "$dir" >> "$log" 2>&1 ||
      cargo install -q wasm-bindgen-cli --version "=$version" --root "$dir" >> "$log" 2>&1 ||
      die "cargo install wasm-bindgen-cli $version failed (see $log)"
  fi
fi

check="$dir/check"
version=$(source "$dir/env.sh" && rustc --version)
if ((!recheck)) && [ -f "$check/passed" ] && [ "$(cat "$check/passed")" = "$want_list" ]; then
  step "5/5 checking: passed before with this toolchain (--check builds it again)"
  step "ready: $version, wasm-ld (LLVM $llvm_major)"
  echo "  source $dir/env.sh"
  exit 0
fi
step "5/5 checking: a cdylib built for wasm32-unknown-unknown"
rm -rf "$check"
mkdir -p "$check/src"
cat > "$check/Cargo.toml" << 'EOF'
[package]
name = "web-toolchain-check"
version = "0.0.0"
edition = "2024"

[lib]
crate-type = ["cdylib"]

[workspace]
EOF
cat > "$check/src/lib.rs" << 'EOF'
//! Exercises the allocator and formatting of the wasm32 standard library.

/// The sum of `a` and `b`, through a heap allocation.
#[unsafe(no_mangle)]
pub extern "C" fn add(a: u32, b: u32) -> u32 {
    let v = vec![a, b];
    format!("{}", v.iter().sum::<u32>()).parse().unwrap_or(0)
}
EOF
(
  # shellcheck source=/dev/null
  source "$dir/env.sh"
  cd "$check"
  CARGO_TARGET_DIR="$check/target" cargo build -q --release --target wasm32-unknown-unknown -Zbuild-std=std,panic_abort
) >> "$log" 2>&1 || die "the check build failed: $(grep -E '^error' "$log" | head -n 3 | tr '\n' ' ')(full output: $log)"
wasm="$check/target/wasm32-unknown-unknown/release/web_toolchain_check.wasm"
[ -f "$wasm" ] || die "the check build made no $wasm"
if command -v node >/dev/null 2>&1; then
  node -e '
    const bytes = require("fs").readFileSync(process.argv[1]);
    WebAssembly.instantiate(bytes).then(({ instance }) => {
      const sum = instance.exports.add(2, 3);
      if (sum !== 5) { console.error("add(2, 3) returned " + sum); process.exit(1); }
    }).catch((e) => { console.error(e); process.exit(1); });' "$wasm" >> "$log" 2>&1 ||
    die "node could not run the check module $wasm (see $log)"
  ran="node $(node --version) ran it"
else
  ran="node not found: built, not run"
fi
# The standard library built for the check (~150 MB) is not kept: projects build their own.
rm -rf "$check/target"
echo "$want_list" > "$check/passed"
step "ready: $version, wasm-ld (LLVM $llvm_major); $ran"
echo "  source $dir/env.sh"
