#!/usr/bin/env python3
"""Loads Tessera's web page in headless Chromium (SwiftShader's WebGPU) and checks it.

  tests/web/smoke.py URL [--expect render|no-webgpu|no-adapter] [--screenshot PATH]
                         [--timeout SECONDS] [--chromium PATH] [--flag FLAG]... [--verbose]

--expect render (the default): the page must report a WebGPU adapter and, in its own
  words, a frame that shows the virtual texture: its status line (`#status`) turns
  class "ok" once the module read a frame back, found the texture in it, and GPU
  feedback had arrived.
--expect no-webgpu: the page is opened from an insecure origin (a host name mapped to
  the URL's address), where browsers hide `navigator.gpu`: it must say so in `#status`.
--expect no-adapter: Chromium runs without its WebGPU flags, so it offers no adapter
  on Linux: the page must say that no adapter was found.

Writes a screenshot (default target/web/smoke.png). Exit status: 0 when the page passes;
1 when it does not (the page's status, its console errors and Chromium's log are
printed); 2 when Chromium is missing or does not start.

Chromium is driven over the DevTools protocol with the standard library only (a
minimal WebSocket client): `--dump-dom` and `--screenshot` return at the load event,
before WebGPU has rendered anything, and `--virtual-time-budget` runs out without
waiting for the GPU.
"""

import argparse
import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--window-size=800,600",
    "--remote-debugging-port=0",
]

WEBGPU_FLAGS = [
    "--enable-unsafe-webgpu",
    "--use-webgpu-adapter=swiftshader",
    # Dawn draws on Vulkan SwiftShader; without Vulkan compositing (SwiftShader too) the
    # canvas' swap-chain images cannot be shared with the compositor ("Could not find
    # SharedImageBackingFactory ... WebgpuSwapChainTexture") and Chromium destroys the
    # device after the first frame.
    "--use-angle=swiftshader",
    "--enable-unsafe-swiftshader",
    "--ignore-gpu-blocklist",
    "--enable-gpu",
    "--enable-features=Vulkan",
    "--use-vulkan=swiftshader",
]

# What `#status` must hold for each expectation (class, words), and which flags run.
EXPECTATIONS = {
    "render": ("ok", ["WebGPU adapter:", "frame check: ok"]),
    "no-webgpu": ("error", ["no WebGPU (navigator.gpu is missing)"]),
    "no-adapter": ("error", ["no GPU adapter found"]),
}

# A host name that resolves to the URL's address but is not a secure context.
INSECURE_HOST = "tessera-insecure.test"


class WebSocket:
    """Just enough of RFC 6455 for the DevTools protocol: text frames, masked out."""

    def __init__(self, url, timeout):
        m = re.match(r"ws://([^/:]+):(\d+)(/.*)", url)
        if not m:
            raise ValueError(f"not a ws:// URL: {url}")
        host, port, path = m.group(1), int(m.group(2)), m.group(3)
        self.sock = socket.create_connection((host, port), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        self.sock.sendall(request.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise ConnectionError("the DevTools socket closed during the handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n", 1)[0]:
            raise ConnectionError(f"DevTools refused the WebSocket: {head.decode(errors='replace')}")

    def send(self, text):
        payload = text.encode()
        n = len(payload)
        if n < 126:
            header = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 1 << 16:
            header = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            header = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        mask = os.urandom(4)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + body)

    def _exact(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("the DevTools socket closed")
            out += chunk
        return out

    def recv(self):
        message = b""
        while True:
            b0, b1 = self._exact(2)
            n = b1 & 0x7F
            if n == 126:
                (n,) = struct.unpack("!H", self._exact(2))
            elif n == 127:
                (n,) = struct.unpack("!Q", self._exact(8))
            payload = self._exact(n)
            opcode = b0 & 0x0F
            if opcode == 8:
                raise ConnectionError("DevTools closed the WebSocket")
            if opcode in (0, 1, 2):
                message += payload
                if b0 & 0x80:
                    return message.decode()
            # Pings and pongs: Chromium sends none unprompted; skip them.


class Page:
    """One tab, driven by DevTools commands; console errors are collected."""

    def __init__(self, ws, verbose):
        self.ws = ws
        self.next_id = 0
        self.console = []
        self.verbose = verbose

    def call(self, method, **params):
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == self.next_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})
            self._event(message)

    def _event(self, message):
        method, params = message.get("method"), message.get("params", {})
        wanted = ("error", "warning", "assert") + (("log", "info", "debug") if self.verbose else ())
        if method == "Runtime.consoleAPICalled" and params.get("type") in wanted:
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in params.get("args", []))
            self.console.append(f"console.{params['type']}: {text}")
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            if entry.get("level") in ("error", "warning") or self.verbose:
                self.console.append(f"browser {entry.get('source', '')} {entry.get('level', '')}: {entry.get('text', '')}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.console.append(f"exception: {text}")

    def evaluate(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result.get("result", {}).get("value")


STATUS_JS = (
    "(() => { const s = document.getElementById('status');"
    " return s ? {cls: s.className, text: s.textContent} : {cls: 'missing', text: ''}; })()"
)


def find_chromium(given):
    for name in [given] if given else ["chromium", "chromium-browser", "google-chrome"]:
        path = shutil.which(name) if name else None
        if path:
            return path
    return None


def start_chromium(binary, profile, timeout, extra):
    """Starts Chromium; returns the process and the DevTools port it listens on."""
    env = dict(os.environ)
    # Without a runtime directory Chromium's D-Bus and Vulkan loaders print errors.
    if not env.get("XDG_RUNTIME_DIR"):
        env["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="tessera-xdg-")
    proc = subprocess.Popen(
        [binary, *FLAGS, *extra, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    port, lines = [], []

    def read():
        for line in proc.stderr:
            lines.append(line.rstrip())
            m = re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line)
            if m and not port:
                port.append(int(m.group(1)))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not port and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    if not port:
        proc.kill()
        tail = "\n".join(lines[-15:])
        raise RuntimeError(f"Chromium did not start its DevTools server:\n{tail}")
    return proc, port[0], lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url")
    parser.add_argument("--expect", choices=sorted(EXPECTATIONS), default="render")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--screenshot", default=os.path.join(repo, "target", "web", "smoke.png"))
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds for the page to pass")
    parser.add_argument("--chromium", help="the browser binary (default: chromium on PATH)")
    parser.add_argument("--flag", action="append", default=[], help="one more Chromium flag (repeatable)")
    parser.add_argument("--verbose", action="store_true", help="print every console message")
    args = parser.parse_args()

    binary = find_chromium(args.chromium)
    if not binary:
        print("smoke: chromium not found: apt-get install -y chromium (or pass --chromium PATH)", file=sys.stderr)
        return 2
    url, flags = args.url, list(args.flag)
    if args.expect != "no-adapter":
        flags = WEBGPU_FLAGS + flags
    if args.expect == "no-webgpu":
        m = re.match(r"(https?://)([^/:]+)(.*)", url)
        if not m:
            print(f"smoke: cannot make an insecure origin of {url}", file=sys.stderr)
            return 2
        flags.append(f"--host-resolver-rules=MAP {INSECURE_HOST} {m.group(2)}")
        url = f"http://{INSECURE_HOST}{m.group(3)}"
    profile = tempfile.mkdtemp(prefix="tessera-chromium-")
    try:
        proc, port, chromium_log = start_chromium(binary, profile, 30, flags)
    except RuntimeError as e:
        print(f"smoke: {e}", file=sys.stderr)
        return 2
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.load(r)
        tab = next(t for t in targets if t.get("type") == "page")
        page = Page(WebSocket(tab["webSocketDebuggerUrl"], timeout=30), args.verbose)
        page.call("Runtime.enable")
        page.call("Log.enable")
        page.call("Page.enable")
        started = time.monotonic()
        page.call("Page.navigate", url=url)
        state = {"cls": "missing", "text": ""}
        while time.monotonic() - started < args.timeout:
            time.sleep(0.5)
            state = page.evaluate(STATUS_JS) or state
            if state["cls"] in ("ok", "error"):
                break
        elapsed = time.monotonic() - started
        shot = page.call("Page.captureScreenshot", format="png")
        if args.screenshot:
            os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
            with open(args.screenshot, "wb") as f:
                f.write(base64.b64decode(shot["data"]))
        version = page.evaluate("navigator.userAgent") or "?"
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(profile, ignore_errors=True)

    print(f"smoke: {version}")
    print(f"smoke: {url} after {elapsed:.1f} s says ({state['cls']}): {state['text']}")
    if args.screenshot:
        print(f"smoke: screenshot {args.screenshot}")
    for line in page.console if args.verbose else page.console[:20]:
        print(f"smoke: {line}")
    wanted_class, words = EXPECTATIONS[args.expect]
    problems = [f"the page does not say '{w}'" for w in words if w not in state["text"]]
    if state["cls"] != wanted_class:
        waited = f" within {args.timeout:.0f} s" if state["cls"] not in ("ok", "error") else ""
        problems.append(f"its status is '{state['cls']}', not '{wanted_class}'{waited}")
    if problems:
        noise = re.compile(r"dbus|DBus|Fontconfig|CreatePlatformSocket|XDG_RUNTIME_DIR")
        useful = [line for line in chromium_log if not noise.search(line)]
        for line in useful[-25:]:
            print(f"smoke: chromium: {line}", file=sys.stderr)
        print(f"smoke: FAILED ({args.expect}): " + "; ".join(problems), file=sys.stderr)
        return 1
    print(f"smoke: passed ({args.expect})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
