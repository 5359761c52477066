#!/usr/bin/env python3
"""Debian's nginx on loopback, for the web viewer's tests and scripts/web (standard library only).

  tests/web/nginx.py DIRECTORY [--port PORT] [--no-range]

Runs /usr/sbin/nginx in the foreground, one process (`daemon off; master_process off;`)
with its own prefix, temp paths, pid and logs in a temporary folder, serving DIRECTORY
on 127.0.0.1:PORT (0: a free port) until interrupted; prints `serving DIRECTORY on
http://127.0.0.1:PORT/` once it accepts connections. Files get their types from
/etc/nginx/mime.types (`application/wasm` for the module, which wasm-bindgen's loader
compiles while it downloads), Range requests are answered with 206 (`--no-range`:
`max_ranges 0;`, a server that answers 200 with the whole file), and nothing is cached.

As a module: `Nginx(servers)` starts one process with several `server` blocks (each its
own port, root and extra directives, and its own access log), `Nginx.log(name)` reads a
block's requests back. Missing nginx is an error that says how to install it.
"""

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

NGINX = "/usr/sbin/nginx"
MIME_TYPES = "/etc/nginx/mime.types"
# One access-log line per request: status, body bytes sent, the Range asked for, the URI.
LOG_FORMAT = "'$status $body_bytes_sent \"$http_range\" $request_uri'"


class Missing(RuntimeError):
    """nginx is not installed."""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Nginx:
    """One nginx process serving `servers`: a list of dicts with `name`, `root` and
    optionally `port` (default: a free one) and `extra` (directives for the block).
    `ports[name]` and `url(name)` say where each listens; `stop()` ends it."""

    def __init__(self, servers, timeout=10.0):
        if not os.path.exists(NGINX):
            raise Missing(
                f"{NGINX} not found: the web tests serve the page from a real web server. "
                "Install it with `apt-get install nginx` (scripts/test does this on Debian)"
            )
        self.dir = tempfile.mkdtemp(prefix="tessera-nginx-")
        self.ports = {}
        blocks = []
        for s in servers:
            port = s.get("port") or free_port()
            self.ports[s["name"]] = port
            blocks.append(
                f"  server {{ listen 127.0.0.1:{port}; server_name _; root {s['root']};\n"
                f"    access_log {self.dir}/{s['name']}.access.log ranges;\n"
                f"    add_header Cache-Control no-store; {s.get('extra', '')} }}\n"
            )
        mime = f"include {MIME_TYPES};" if os.path.exists(MIME_TYPES) else "types { application/wasm wasm; text/html html; text/javascript js; }"
        d = self.dir
        conf = (
            f"daemon off; master_process off; worker_processes 1; pid {d}/nginx.pid;\n"
            f"error_log {d}/error.log warn;\n"
            "events { worker_connections 256; }\n"
            f"http {{ {mime} default_type application/octet-stream; sendfile on; keepalive_requests 10000;\n"
            f"  log_format ranges {LOG_FORMAT};\n"
            f"  client_body_temp_path {d}/body; proxy_temp_path {d}/proxy; fastcgi_temp_path {d}/fastcgi;\n"
            f"  uwsgi_temp_path {d}/uwsgi; scgi_temp_path {d}/scgi;\n" + "".join(blocks) + "}\n"
        )
        with open(os.path.join(d, "nginx.conf"), "w") as f:
            f.write(conf)
        self.proc = subprocess.Popen(
            [NGINX, "-p", d, "-c", os.path.join(d, "nginx.conf")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + timeout
        waiting = dict(self.ports)
        while waiting:
            name, port = next(iter(waiting.items()))
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                del waiting[name]
                continue
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                err = self.proc.stderr.read() if self.proc.poll() is not None else ""
                self.stop()
                raise RuntimeError(f"nginx did not listen on 127.0.0.1:{port} ({name}): {err.strip()} {self._errors()}")
            time.sleep(0.02)

    def url(self, name, host="127.0.0.1"):
        return f"http://{host}:{self.ports[name]}/"

    def log(self, name):
        """The requests `name` answered so far: (status, body bytes, Range header, URI)."""
        path = os.path.join(self.dir, f"{name}.access.log")
        out = []
        try:
            with open(path) as f:
                for line in f:
                    status, sent, rest = line.split(" ", 2)
                    wanted, _, uri = rest.rpartition('" ')
                    out.append((int(status), int(sent), wanted.lstrip('"'), uri.strip()))
        except FileNotFoundError:
            pass
        return out

    def _errors(self):
        try:
            with open(os.path.join(self.dir, "error.log")) as f:
                return f.read().strip()[-1000:]
        except OSError:
            return ""

    def stop(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--no-range", action="store_true", help="answer Range requests with 200 (max_ranges 0)")
    args = parser.parse_args()
    root = os.path.abspath(args.directory)
    try:
        server = Nginx([{"name": "site", "root": root, "port": args.port, "extra": "max_ranges 0;" if args.no_range else ""}])
    except (Missing, RuntimeError) as e:
        print(f"nginx.py: {e}", file=sys.stderr)
        return 2
    # SIGTERM (scripts/web's trap) ends nginx too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"serving {root} on {server.url('site')}", flush=True)
    try:
        server.proc.wait()
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
