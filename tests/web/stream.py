#!/usr/bin/env python3
"""Streams a baked atlas into Tessera's web page in headless Chromium and checks it.

  tests/web/stream.py SITE_DIR ATLAS [--camera static|fly] [--timeout SECONDS]
                      [--screenshot PATH] [--chromium PATH] [--bench [JSON]] [--verbose]

SITE_DIR is the built page (scripts/web --build-only: target/web/site), ATLAS a baked
atlas. The script serves a scratch folder holding both from Debian's nginx on loopback
(tests/web/nginx.py: one process, a server block per case; missing nginx is an error:
apt-get install nginx), checks that it answers what the page needs (206 to a Range
request, application/wasm for the module; 200 to a Range request where Range is off),
and runs these cases, each in a fresh Chromium (SwiftShader's WebGPU, the flags of
smoke.py):

  stream      index.html?atlas=atlas.tsa&camera=CAMERA: the page's #stats must say fully
              resident and its frame check (the first fully resident frame with the
              camera still, read back in the page) must find a picture: luma varied,
              many colours, no unwritten pool texels. Prints time to first frame and
              to fully resident, requests and bytes fetched (and what nginx logged).
              Screenshot: --screenshot.
  missing     atlas=missing.tsa: the page must say "no atlas at ... (404)".
  truncated   atlas=truncated.tsa (ATLAS cut to a third): the page must show the core's
              error for it (class "error", naming the atlas).
  not-atlas   atlas=not-atlas.tsa (a PNG): the page must say that it is not a Tessera
              atlas.
  no-range    the same page from a server block with `max_ranges 0;` (answers 200 with
              the whole file): the page must say "the server does not support HTTP range
              requests".
  revisit     the static view twice in one browser: the second visit must read the
              atlas' blocks from the disk tier (Cache Storage) and request only the
              atlas' first range (which tells its version, the ETag).
  cors        an atlas on another origin (http://localhost:OTHER_PORT/, no CORS headers):
              the page must say that the fetch was refused.

After the stream case the same view is rendered natively (tessera-web's plane_frame
example, built with `cargo build --workspace`, on lavapipe here), its atlas read from
the same nginx over HTTP through the engine's native store, flown frame by frame along
the same camera path until fully resident. The page's checked frame
(window.tesseraFrame) must match it: PSNR over RGB at least --min-psnr (default 45 dB;
56.5 dB seen). On failure both frames and their difference are written beside
--screenshot (stream-page.png, stream-native.png, stream-diff.png). --no-native skips
the native run.

The run's figures, browser against native, are printed as one block: range requests,
bytes, tiles streamed per second (tiles decoded, or uploaded natively, over the seconds
from the atlas open to fully resident), time to fully resident, and the median frame
time (the page: the interval between animation frames from its first frame to fully
resident, recorded by a script DevTools adds to the page, and the CPU time of its frame
callback; natively: the wall time of a frame, GPU wait included). --bench [JSON] writes
them to JSON (default target/web/bench.json), opens the page with overlay=0 (the native
frame draws no egui overlay) and builds the native side with --release, as the page's
module is.

Exit status: 0 when every case passes, 1 otherwise, 2 when Chromium or nginx is missing.
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
import nginx  # noqa: E402 (beside this file)
import smoke  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

STATS_JS = "(() => { const s = document.getElementById('stats'); return s ? s.textContent : ''; })()"

# The checked frame's pixels, base64 (window.tesseraFrame, set by the page).
FRAME_JS = """(() => { const f = window.tesseraFrame; if (!f) return null; let s = '';
  for (let i = 0; i < f.rgba.length; i += 32768) s += String.fromCharCode.apply(null, f.rgba.subarray(i, i + 32768));
  return {width: f.width, height: f.height, rgba: btoa(s)}; })()"""


# Added to the page before its own scripts: records the animation-frame timestamps (and
# the CPU time of the page's own frame callbacks) from the first frame that wrote #stats
# to the first that says fully resident, in window.tesseraPace.
PACE_JS = """(() => {
  const raf = window.requestAnimationFrame.bind(window);
  const pace = window.tesseraPace = {stamps: [], busy: [], recording: false, done: false};
  window.requestAnimationFrame = cb => raf(t => {
    const s = performance.now();
    try { cb(t); } finally { if (pace.recording && !pace.done) pace.busy.push(performance.now() - s); }
  });
  const tick = t => {
    const el = document.getElementById('stats');
    const text = el ? el.textContent : '';
    if (!pace.done && text) {
      pace.recording = true;
      pace.stamps.push(t);
      if (text.includes('"fully_resident":true')) pace.done = true;
    }
    raf(tick);
  };
  raf(tick);
})();"""

PACE_READ_JS = """(() => { const p = window.tesseraPace;
  return p ? {stamps: p.stamps, busy: p.busy, agent: navigator.userAgent} : null; })()"""


def median(values):
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


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


def open_page(binary, url, timeout, until, verbose, earlier_visits=0):
    """Loads `url` in a fresh Chromium; polls until `until(status, stats)` or the
    timeout; returns (status, stats, seconds, console lines, screenshot PNG bytes,
    checked frame, pace: {stamps, busy} from PACE_JS). With `earlier_visits`, the page
    is loaded that many times before in the same browser (its storage kept), each until
    `until` or the timeout, and the last tuple gains the earlier visits' #stats."""
    profile = tempfile.mkdtemp(prefix="tessera-chromium-")
    proc, port, _log = smoke.start_chromium(binary, profile, 30, smoke.WEBGPU_FLAGS)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            tab = next(t for t in json.load(r) if t.get("type") == "page")
        page = smoke.Page(smoke.WebSocket(tab["webSocketDebuggerUrl"], timeout=30), verbose)
        page.call("Runtime.enable")
        page.call("Page.enable")
        page.call("Page.addScriptToEvaluateOnNewDocument", source=PACE_JS)
        earlier = []
        for visit in range(earlier_visits + 1):
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
            if visit < earlier_visits:
                earlier.append(stats)
        elapsed = time.monotonic() - started
        shot = page.call("Page.captureScreenshot", format="png")
        frame = page.evaluate(FRAME_JS)
        pace = page.evaluate(PACE_READ_JS)
        result = (state, stats, elapsed, page.console, base64.b64decode(shot["data"]), frame, pace)
        return result + (earlier,) if earlier_visits else result
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)


def plane_frame_binary(release):
    """Builds the plane_frame example and returns its path, or raises RuntimeError. Built
    with --workspace: the features of its dependencies are then those of the workspace's
    own build (`cargo test --workspace`), whose compiled crates it reuses, where `-p
    tessera-web` would unify fewer features and compile a hundred crates again (four
    minutes of a cold CI run on 2 cores)."""
    cmd = ["cargo", "build", "--locked", "-q", "--workspace", *(["--release"] if release else []),
           "--example", "plane_frame", "--message-format", "json-render-diagnostics"]
    build = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if build.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: " + build.stderr.strip()[-800:])
    for line in build.stdout.splitlines():
        message = json.loads(line)
        target = message.get("target", {})
        if message.get("reason") == "compiler-artifact" and target.get("name") == "plane_frame" \
                and "example" in target.get("kind", []) and message.get("executable"):
            return message["executable"]
    raise RuntimeError(f"{' '.join(cmd)} named no plane_frame executable")


def run_native(args, atlas, size, release):
    """plane_frame over `atlas` (a file or URL) at `size`: (RGBA8 pixels, its figures
    (--json), its summary line), or raises RuntimeError with its error."""
    work = tempfile.mkdtemp(prefix="tessera-native-")
    out = os.path.join(work, "native.rgba")
    env = dict(os.environ)
    if not env.get("XDG_RUNTIME_DIR"):
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tessera-xdg-")
    try:
        cmd = [plane_frame_binary(release), atlas, args.camera, str(size[0]), str(size[1]), out, "--json"]
        run = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError((run.stderr.strip() or run.stdout.strip())[-800:])
        lines = run.stdout.strip().splitlines()
        figures = json.loads(next(line for line in lines if line.startswith("{")))
        with open(out, "rb") as f:
            return f.read(), figures, lines[-1]
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compare_frames(args, frame, native, summary, failures):
    """The page's checked frame against plane_frame's native render of the same view."""
    width, height, page = frame["width"], frame["height"], base64.b64decode(frame["rgba"])
    if len(native) != len(page):
        failures.append(f"stream: the native frame has {len(native)} bytes, the page's {len(page)}")
        return
    value = psnr(page, native)
    print(f"stream: the page's frame ({width}x{height}, SwiftShader) against plane_frame natively "
          f"({summary.split(' on ', 1)[-1]}): PSNR {value:.1f} dB (at least {args.min_psnr} dB)")
    if value < args.min_psnr or args.verbose:
        out = os.path.dirname(os.path.abspath(args.screenshot))
        os.makedirs(out, exist_ok=True)
        diff = bytes(min(255, abs(a - b) * 8) if i % 4 != 3 else 255 for i, (a, b) in enumerate(zip(page, native)))
        for name, pixels in (("stream-page.png", page), ("stream-native.png", native), ("stream-diff.png", diff)):
            write_png(os.path.join(out, name), width, height, pixels)
        print(f"stream: wrote stream-page.png, stream-native.png, stream-diff.png in {out}")
    if value < args.min_psnr:
        failures.append(f"stream: PSNR {value:.1f} dB against the native render, below {args.min_psnr} dB")


def per_second(count, from_ms, to_ms):
    seconds = (to_ms - from_ms) / 1e3 if to_ms is not None and from_ms is not None else 0
    return round(count / seconds, 1) if seconds > 0 else None


def browser_figures(stats, pace, served):
    """The page's figures from #stats, its pace and nginx's log of the atlas."""
    stamps = (pace or {}).get("stamps") or []
    intervals = [b - a for a, b in zip(stamps, stamps[1:]) if b > a]
    busy = (pace or {}).get("busy") or []
    return {
        "requests": stats["requests"],
        "bytes_fetched": stats["bytes_fetched"],
        "nginx_requests": len(served),
        "nginx_bytes": sum(sent for _status, sent, _range, _uri in served),
        "tiles_decoded": stats["tiles_decoded"],
        "tiles_per_s": per_second(stats["tiles_decoded"], stats["opened_ms"], stats["resident_ms"]),
        "opened_ms": stats["opened_ms"],
        "first_frame_ms": stats["first_frame_ms"],
        "resident_ms": stats["resident_ms"],
        "frames": len(stamps),
        "frame_ms_median": round(median(intervals), 3) if intervals else None,
        "frame_ms_p90": round(sorted(intervals)[int(len(intervals) * 0.9)], 3) if intervals else None,
        "callback_ms_median": round(median(busy), 3) if busy else None,
        "page_frame_ms_median": stats.get("frame_ms_median"),
        "worst_decode_ms": stats["worst_decode_ms"],
    }


def print_comparison(bench):
    b, n = bench["browser"], bench.get("native") or {}

    def cell(v, unit=""):
        return "-" if v is None else f"{v:,}{unit}" if isinstance(v, int) else f"{v:,.1f}{unit}"

    rows = [
        ("range requests", b["requests"], n.get("requests")),
        ("  nginx's log of them", b["nginx_requests"], n.get("nginx_requests")),
        ("bytes fetched", b["bytes_fetched"], n.get("bytes_fetched")),
        ("tiles decoded (page) / uploaded (native)", b["tiles_decoded"], n.get("tiles_uploaded")),
        ("tiles per second (open to resident)", b["tiles_per_s"], n.get("tiles_per_s")),
        ("atlas open, ms after start", b["opened_ms"], n.get("opened_ms")),
        ("fully resident, ms after start", b["resident_ms"], n.get("resident_ms")),
        ("frames to fully resident", b["frames"], n.get("frames")),
        ("frame time median, ms", b["frame_ms_median"], n.get("frame_ms_median")),
        ("frame time 90th percentile, ms", b["frame_ms_p90"], n.get("frame_ms_p90")),
        ("page frame callback median, ms", b["callback_ms_median"], None),
    ]
    print(f"stream: browser{' (overlay=0)' if bench.get('overlay_off') else ''} against native, {bench['camera']} camera, {bench['atlas_bytes']:,}-byte atlas "
          f"from nginx on loopback, {bench['size'][0]}x{bench['size'][1]}:")
    print(f"stream:   {'':42} {'browser (SwiftShader)':>22} {'native (' + n.get('profile', '-') + ')':>16}")
    for name, x, y in rows:
        print(f"stream:   {name:42} {cell(x):>22} {cell(y):>16}")
    print(f"stream:   browser: {bench['browser_agent']}; native: {n.get('adapter', 'not run')}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site")
    parser.add_argument("atlas")
    parser.add_argument("--camera", default="fly", choices=["static", "fly"])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the streaming case")
    parser.add_argument("--screenshot", default=os.path.join(REPO, "target", "web", "stream.png"))
    parser.add_argument("--chromium")
    parser.add_argument("--only", action="append", help="run only these cases (repeatable)")
    parser.add_argument("--verbose", action="store_true")
    parser.add_argument("--no-native", action="store_true", help="skip the native render and its comparison")
    parser.add_argument("--min-psnr", type=float, default=45.0)
    parser.add_argument("--bench", nargs="?", const=os.path.join(REPO, "target", "web", "bench.json"),
                        help="write the browser and native figures to this JSON file (native built with --release)")
    args = parser.parse_args()
    binary = smoke.find_chromium(args.chromium)
    if not binary:
        print("stream: chromium not found: apt-get install -y chromium (or pass --chromium PATH)", file=sys.stderr)
        return 2

    scratch = tempfile.mkdtemp(prefix="tessera-stream-")
    server = None
    failures = []
    try:
        for name in os.listdir(args.site):
            os.symlink(os.path.abspath(os.path.join(args.site, name)), os.path.join(scratch, name))
        atlas = os.path.join(scratch, "atlas.tsa")
        if os.path.lexists(atlas):
            os.remove(atlas)
        os.symlink(os.path.abspath(args.atlas), atlas)
        atlas_bytes = os.path.getsize(args.atlas)
        with open(args.atlas, "rb") as f:
            head = f.read(atlas_bytes // 3)
        with open(os.path.join(scratch, "truncated.tsa"), "wb") as f:
            f.write(head)
        # Not an atlas: a picture (what a wrong link most likely serves).
        picture = bytes((x * 4 % 256, y * 4 % 256, 128, 255)[c] for y in range(64) for x in range(64) for c in range(4))
        write_png(os.path.join(scratch, "not-atlas.tsa"), 64, 64, picture)

        # One nginx: the page's origin, a block without Range support, another origin
        # (reached as localhost: no CORS headers) and the native run's own block.
        try:
            server = nginx.Nginx([
                {"name": "site", "root": scratch},
                {"name": "no-range", "root": scratch, "extra": "max_ranges 0;"},
                {"name": "other", "root": scratch},
                {"name": "native", "root": scratch},
            ])
        except nginx.Missing as e:
            print(f"stream: {e}", file=sys.stderr)
            return 2
        base, plain_base = server.url("site"), server.url("no-range")
        other_base = server.url("other", host="localhost")
        check_server(base, plain_base, failures)
        if failures:
            raise RuntimeError("nginx does not serve what the page needs")

        def finished(state, _stats):
            return state["cls"] in ("ok", "error")

        def case(name, url, words, cls="error", timeout=60.0):
            if args.only and name not in args.only:
                return None
            state, stats, elapsed, console, png, frame, pace = open_page(binary, url, timeout, finished, args.verbose)
            print(f"stream: [{name}] {url} after {elapsed:.1f} s ({state['cls']}): {state['text']}")
            problems = [f"the page does not say '{w}'" for w in words if w not in state["text"]]
            if state["cls"] != cls:
                problems.append(f"its status is '{state['cls']}', not '{cls}'")
            for line in console[:10] if problems else []:
                print(f"stream: [{name}] {line}")
            if problems:
                failures.append(f"{name}: " + "; ".join(problems))
            return state, stats, elapsed, png, frame, pace

        probed = len(server.log("site"))  # check_server's own requests, not the page's
        result = case(
            "stream",
            # --bench: without the egui overlay, which the native frame does not draw.
            f"{base}index.html?atlas=atlas.tsa&camera={args.camera}" + ("&overlay=0" if args.bench else ""),
            ["fully resident: yes", "Frame check: ok"],
            cls="ok",
            timeout=args.timeout,
        )
        if result:
            state, stats, _elapsed, png, frame, pace = result
            if args.screenshot:
                os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
                with open(args.screenshot, "wb") as f:
                    f.write(png)
                print(f"stream: screenshot {args.screenshot}")
            print(f"stream: stats {json.dumps(stats)}")
            served = [r for r in server.log("site")[probed:] if r[3].split("?")[0] == "/atlas.tsa"]
            if not stats or not stats.get("fully_resident") or not (stats.get("check") or {}).get("ok"):
                failures.append("stream: #stats does not say fully resident with a checked frame")
            else:
                print(
                    f"stream: {args.camera}: atlas open {stats['opened_ms']} ms, first frame {stats['first_frame_ms']} ms, "
                    f"fully resident {stats['resident_ms']} ms after start (frame {stats['frame']}); "
                    f"{stats['requests']} requests, {stats['bytes_fetched']} bytes "
                    f"({stats['bytes_fetched'] / atlas_bytes * 100:.1f}% of the {atlas_bytes}-byte atlas; "
                    f"nginx answered {len(served)} requests for it), "
                    f"{stats['tiles_resident']} tiles resident, {stats['tiles_decoded']} tiles decoded, "
                    f"worst decode step {stats['worst_decode_ms']} ms"
                )
                if any(status != 206 for status, _sent, _range, _uri in served):
                    failures.append("stream: nginx answered a request for the atlas with other than 206: "
                                    + ", ".join(sorted({str(r[0]) for r in served})))
                bench = {
                    "camera": args.camera,
                    "overlay_off": args.bench is not None,
                    "atlas_bytes": atlas_bytes,
                    "size": [frame["width"], frame["height"]] if frame else None,
                    "browser_agent": (pace or {}).get("agent", "?"),
                    "browser": browser_figures(stats, pace, served),
                    "native": None,
                }
                if not frame:
                    failures.append("stream: the page exposed no frame (window.tesseraFrame)")
                elif not args.no_native:
                    try:
                        native, figures, summary = run_native(
                            args, server.url("native") + "atlas.tsa", bench["size"], args.bench is not None)
                    except RuntimeError as e:
                        failures.append(f"stream: the native render failed: {e}")
                    else:
                        native_served = [r for r in server.log("native") if r[3] == "/atlas.tsa"]
                        figures["nginx_requests"] = len(native_served)
                        figures["tiles_per_s"] = per_second(figures["tiles_uploaded"], figures["opened_ms"], figures["resident_ms"])
                        bench["native"] = figures
                        compare_frames(args, frame, native, summary, failures)
                print_comparison(bench)
                if args.bench:
                    bench["machine"] = machine()
                    os.makedirs(os.path.dirname(os.path.abspath(args.bench)), exist_ok=True)
                    with open(args.bench, "w") as f:
                        json.dump(bench, f, indent=2)
                        f.write("\n")
                    print(f"stream: wrote {args.bench}")
        case("missing", f"{base}index.html?atlas=missing.tsa", ["no atlas at", "missing.tsa (404)"])
        case("truncated", f"{base}index.html?atlas=truncated.tsa", ["truncated.tsa"])
        case("not-atlas", f"{base}index.html?atlas=not-atlas.tsa",
             ["not-atlas.tsa", "not a Tessera atlas", "it looks like a PNG image: bake it first"])
        revisit(args, binary, f"{base}index.html?atlas=atlas.tsa&camera=static&overlay=0", failures)
        case(
            "no-range",
            f"{plain_base}index.html?atlas=atlas.tsa",
            ["the server does not support HTTP range requests (it answered 200 to a Range request"],
        )
        case("cors", f"{base}index.html?atlas={other_base}atlas.tsa", ["was refused", "CORS"])
    except RuntimeError as e:
        failures.append(str(e))
    finally:
        if server:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    if failures:
        for f in failures:
            print(f"stream: FAILED {f}", file=sys.stderr)
        return 1
    print("stream: passed")
    return 0


def revisit(args, binary, url, failures):
    """The disk tier: the static view streamed twice in one browser. The first visit
    writes the atlas' blocks to Cache Storage (nginx sends an ETag, so the tier is on);
    the second must read them back: its only request is the atlas' first range, which
    tells its version."""
    if args.only and "revisit" not in args.only:
        return

    def resident(state, stats):
        return state["cls"] == "error" or bool(stats and stats.get("fully_resident"))

    state, second, _elapsed, _console, _png, _frame, _pace, earlier = open_page(
        binary, url, 60.0, resident, args.verbose, earlier_visits=1)
    first = earlier[0] or {}
    second = second or {}
    tier1, tier2 = first.get("disk_tier") or {}, second.get("disk_tier") or {}
    print(f"stream: [revisit] {url}: first visit {first.get('requests')} requests, {first.get('bytes_fetched')} bytes, "
          f"disk tier: {tier1.get('note')}, {tier1.get('writes')} blocks written; second visit "
          f"{second.get('requests')} requests, {second.get('bytes_fetched')} bytes, "
          f"{tier2.get('hits')} blocks ({tier2.get('hit_bytes')} bytes) from Cache Storage, "
          f"fully resident after {second.get('resident_ms')} ms (first: {first.get('resident_ms')} ms)")
    problems = []
    if not first.get("fully_resident") or not second.get("fully_resident"):
        problems.append(f"a visit did not become fully resident (status: {state['text']})")
    if not tier1.get("on"):
        problems.append(f"the disk tier is off: {tier1.get('note')}")
    if not tier2.get("hits"):
        problems.append("the second visit read nothing from Cache Storage")
    if second.get("requests") != 1:
        problems.append("the second visit made other requests than the first range's (which tells the "
                        "atlas' version: its ETag)")
    if problems:
        failures.append("revisit: " + "; ".join(problems))


def check_server(base, plain_base, failures):
    """What the page needs from the servers: 206 to a Range request and application/wasm
    for the module from the page's server; 200 to a Range request from the one without."""
    def get(url, headers=None):
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
            return r.status, r.headers, r.read(64)

    status, headers, body = get(base + "atlas.tsa", {"Range": "bytes=0-15"})
    if status != 206 or len(body) != 16 or not (headers.get("Content-Range") or "").startswith("bytes 0-15/"):
        failures.append(f"nginx: a Range request got {status}, {len(body)} bytes, Content-Range {headers.get('Content-Range')!r}")
    status, headers, _ = get(base + "tessera_web_bg.wasm")
    if headers.get_content_type() != "application/wasm":
        failures.append(f"nginx: tessera_web_bg.wasm is served as {headers.get_content_type()}, not application/wasm")
    status, headers, body = get(plain_base + "atlas.tsa", {"Range": "bytes=0-15"})
    if status != 200 or headers.get("Content-Range"):
        failures.append(f"nginx: the block with max_ranges 0 answered a Range request with {status}, not 200")


def machine():
    """The CPU, its cores and its load, for the figures' record."""
    model = "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "?")
    except OSError:
        pass
    # Other work on the machine skews every figure: the load when they were taken.
    return {"cpu": model, "cores": os.cpu_count(), "load_average": [round(v, 2) for v in os.getloadavg()]}


if __name__ == "__main__":
    sys.exit(main())
