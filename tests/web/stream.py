#!/usr/bin/env python3
"""Streams a baked atlas into Tessera's web page in headless Chromium and checks it.

  tests/web/stream.py SITE_DIR ATLAS [--camera static|fly] [--timeout SECONDS]
                      [--screenshot PATH] [--chromium PATH] [--verbose]

SITE_DIR is the built page (scripts/web --build-only: target/web/site), ATLAS a baked
atlas. The script serves a scratch folder holding both with tests/web/range_server.py
(HTTP Range support, loopback only) and runs these cases, each in a fresh Chromium
(SwiftShader's WebGPU, the flags of smoke.py):

  stream      index.html?atlas=atlas.tsa&camera=CAMERA: the page's #stats must say fully
              resident and its frame check (the first fully resident frame with the
              camera still, read back in the page) must find a picture: luma varied,
              many colours, no unwritten pool texels. Prints time to first frame and
              to fully resident, requests and bytes fetched. Screenshot: --screenshot.
  missing     atlas=missing.tsa: the page must say "no atlas at ... (404)".
  truncated   atlas=truncated.tsa (ATLAS cut to a third): the page must show the core's
              error for it (class "error", naming the atlas).
  no-range    the same page from a server that ignores Range (answers 200): the page must
              say "the server does not support HTTP range requests".
  cors        an atlas on another origin that sends no CORS headers: the page must say
              that the fetch was refused.

After the stream case, the page's checked frame (window.tesseraFrame) is compared with
the same view rendered natively (`cargo run -p tessera-web --example plane_frame`, on
lavapipe here): PSNR over RGB must reach --min-psnr (default 45 dB; 56.5 dB seen). On failure both
frames and their difference are written beside --screenshot (stream-page.png,
stream-native.png, stream-diff.png). --no-native skips the comparison.

Exit status: 0 when every case passes, 1 otherwise, 2 when Chromium is missing.
"""

import argparse
import base64
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zlib

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402 (beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))

STATS_JS = "(() => { const s = document.getElementById('stats'); return s ? s.textContent : ''; })()"

# The checked frame's pixels, base64 (window.tesseraFrame, set by the page).
FRAME_JS = """(() => { const f = window.tesseraFrame; if (!f) return null; let s = '';
  for (let i = 0; i < f.rgba.length; i += 32768) s += String.fromCharCode.apply(null, f.rgba.subarray(i, i + 32768));
  return {width: f.width, height: f.height, rgba: btoa(s)}; })()"""


def write_png(path, width, height, rgba):
    """RGBA8 rows as a PNG (standard library only)."""
    rows = b"".join(b"\0" + rgba[y * width * 4 : (y + 1) * width * 4] for y in range(height))

    def chunk(kind, data):
        body = kind + data
        return struct.pack("!I", len(data)) + body + struct.pack("!I", zlib.crc32(body) & 0xFFFFFFFF)

    head = struct.pack("!IIBBBBB", width, height, 8, 6, 0, 0, 0)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", head) + chunk(b"IDAT", zlib.compress(rows, 6)) + chunk(b"IEND", b""))


def psnr(a, b):
    """PSNR (dB) over the RGB channels of two RGBA8 images of one size."""
    total, n = 0, 0
    for i in range(0, len(a), 4):
        for c in range(3):
            d = a[i + c] - b[i + c]
            total += d * d
        n += 3
    return math.inf if total == 0 else 10 * math.log10(255 * 255 * n / total)


def serve(directory, no_range=False):
    """Starts range_server.py on a free port; returns the process and its base URL."""
    cmd = [sys.executable, os.path.join(HERE, "range_server.py"), directory, "--port", "0"]
    if no_range:
        cmd.append("--no-range")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    line = proc.stdout.readline()
    if not line.startswith("serving "):
        proc.kill()
        raise RuntimeError(f"range_server.py did not start: {line!r}")
    return proc, line.split(" on ", 1)[1].strip()


def open_page(binary, url, timeout, until, verbose):
    """Loads `url` in a fresh Chromium; polls until `until(status, stats)` or the
    timeout; returns (status, stats, seconds, console lines, screenshot PNG bytes)."""
    profile = tempfile.mkdtemp(prefix="tessera-chromium-")
    proc, port, _log = smoke.start_chromium(binary, profile, 30, smoke.WEBGPU_FLAGS)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            tab = next(t for t in json.load(r) if t.get("type") == "page")
        page = smoke.Page(smoke.WebSocket(tab["webSocketDebuggerUrl"], timeout=30), verbose)
        page.call("Runtime.enable")
        page.call("Page.enable")
        started = time.monotonic()
        page.call("Page.navigate", url=url)
        state, stats = {"cls": "missing", "text": ""}, None
        while time.monotonic() - started < timeout:
            time.sleep(0.25)
            state = page.evaluate(smoke.STATUS_JS) or state
            text = page.evaluate(STATS_JS) or ""
            stats = json.loads(text) if text else stats
            if until(state, stats):
                break
        elapsed = time.monotonic() - started
        shot = page.call("Page.captureScreenshot", format="png")
        frame = page.evaluate(FRAME_JS)
        return state, stats, elapsed, page.console, base64.b64decode(shot["data"]), frame
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def compare_native(args, frame, failures):
    """The page's checked frame against plane_frame's native render of the same view."""
    if not frame:
        failures.append("stream: the page exposed no frame (window.tesseraFrame)")
        return
    width, height, page = frame["width"], frame["height"], base64.b64decode(frame["rgba"])
    repo = os.path.dirname(os.path.dirname(HERE))
    native_path = os.path.join(tempfile.mkdtemp(prefix="tessera-native-"), "native.rgba")
    env = dict(os.environ)
    if not env.get("XDG_RUNTIME_DIR"):
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tessera-xdg-")
    cmd = ["cargo", "run", "--locked", "-q", "-p", "tessera-web", "--example", "plane_frame", "--",
           os.path.abspath(args.atlas), args.camera, str(width), str(height), native_path]
    run = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        failures.append(f"stream: the native render failed: {run.stderr.strip()[-600:]}")
        return
    with open(native_path, "rb") as f:
        native = f.read()
    shutil.rmtree(os.path.dirname(native_path), ignore_errors=True)
    if len(native) != len(page):
        failures.append(f"stream: the native frame has {len(native)} bytes, the page's {len(page)}")
        return
    value = psnr(page, native)
    print(f"stream: the page's frame ({width}x{height}, SwiftShader) against plane_frame natively "
          f"({run.stdout.strip().split(' on ', 1)[-1]}): PSNR {value:.1f} dB (at least {args.min_psnr} dB)")
    if value < args.min_psnr or args.verbose:
        out = os.path.dirname(os.path.abspath(args.screenshot))
        os.makedirs(out, exist_ok=True)
        diff = bytes(min(255, abs(a - b) * 8) if i % 4 != 3 else 255 for i, (a, b) in enumerate(zip(page, native)))
        for name, pixels in (("stream-page.png", page), ("stream-native.png", native), ("stream-diff.png", diff)):
            write_png(os.path.join(out, name), width, height, pixels)
        print(f"stream: wrote stream-page.png, stream-native.png, stream-diff.png in {out}")
    if value < args.min_psnr:
        failures.append(f"stream: PSNR {value:.1f} dB against the native render, below {args.min_psnr} dB")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site")
    parser.add_argument("atlas")
    parser.add_argument("--camera", default="fly", choices=["static", "fly"])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the streaming case")
    parser.add_argument("--screenshot", default=os.path.join(os.path.dirname(os.path.dirname(HERE)), "target", "web", "stream.png"))
    parser.add_argument("--chromium")
    parser.add_argument("--only", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-native", action="store_true", help="skip the comparison with a native render")
    parser.add_argument("--min-psnr", type=float, default=45.0)
    args = parser.parse_args()
    binary = smoke.find_chromium(args.chromium)
    if not binary:
        print("stream: chromium not found: apt-get install -y chromium (or pass --chromium PATH)", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="tessera-stream-")
    servers = []
    failures = []
    try:
        for name in os.listdir(args.site):
            os.symlink(os.path.abspath(os.path.join(args.site, name)), os.path.join(scratch, name))
        atlas = os.path.join(scratch, "atlas.tsa")
        if os.path.lexists(atlas):
            os.remove(atlas)
        os.symlink(os.path.abspath(args.atlas), atlas)
        with open(args.atlas, "rb") as f:
            whole = f.read()
        with open(os.path.join(scratch, "truncated.tsa"), "wb") as f:
            f.write(whole[: len(whole) // 3])
        proc, base = serve(scratch)
        servers.append(proc)
        plain, plain_base = serve(scratch, no_range=True)
        servers.append(plain)
        other, other_base = serve(scratch)
        servers.append(other)
        other_base = other_base.replace("127.0.0.1", "localhost")

        def finished(state, _stats):
            return state["cls"] in ("ok", "error")

        def case(name, url, words, cls="error", timeout=60.0):
            if args.only and name not in args.only:
                return None
            state, stats, elapsed, console, png, frame = open_page(binary, url, timeout, finished, args.verbose)
            print(f"stream: [{name}] {url} after {elapsed:.1f} s ({state['cls']}): {state['text']}")
            problems = [f"the page does not say '{w}'" for w in words if w not in state["text"]]
            if state["cls"] != cls:
                problems.append(f"its status is '{state['cls']}', not '{cls}'")
            for line in console[:10] if problems else []:
                print(f"stream: [{name}] {line}")
            if problems:
                failures.append(f"{name}: " + "; ".join(problems))
            return state, stats, elapsed, png, frame

        result = case(
            "stream",
            f"{base}index.html?atlas=atlas.tsa&camera={args.camera}",
            ["fully resident: yes", "Frame check: ok"],
            cls="ok",
            timeout=args.timeout,
        )
        if result:
            _state, stats, _elapsed, png, frame = result
            if args.screenshot:
                os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
                with open(args.screenshot, "wb") as f:
                    f.write(png)
                print(f"stream: screenshot {args.screenshot}")
            print(f"stream: stats {json.dumps(stats)}")
            if not stats or not stats.get("fully_resident") or not (stats.get("check") or {}).get("ok"):
                failures.append("stream: #stats does not say fully resident with a checked frame")
            else:
                print(
                    f"stream: {args.camera}: atlas open {stats['opened_ms']} ms, first frame {stats['first_frame_ms']} ms, "
                    f"fully resident {stats['resident_ms']} ms after start (frame {stats['frame']}); "
                    f"{stats['requests']} requests, {stats['bytes_fetched']} bytes "
                    f"({stats['bytes_fetched'] / len(whole) * 100:.1f}% of the {len(whole)}-byte atlas), "
                    f"{stats['tiles_resident']} tiles resident, {stats['tiles_decoded']} tiles decoded, "
                    f"worst decode step {stats['worst_decode_ms']} ms"
                )
            if not args.no_native:
                compare_native(args, frame, failures)
        case("missing", f"{base}index.html?atlas=missing.tsa", ["no atlas at", "missing.tsa (404)"])
        case("truncated", f"{base}index.html?atlas=truncated.tsa", ["truncated.tsa"])
        case(
            "no-range",
            f"{plain_base}index.html?atlas=atlas.tsa",
            ["the server does not support HTTP range requests (it answered 200 to a Range request"],
        )
        case("cors", f"{base}index.html?atlas={other_base}atlas.tsa", ["was refused", "CORS"])
    finally:
        for proc in servers:
            proc.kill()
            proc.wait()
        shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        for f in failures:
            print(f"stream: FAILED {f}", file=sys.stderr)
        return 1
    print("stream: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
