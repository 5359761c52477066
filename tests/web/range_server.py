#!/usr/bin/env python3
"""A static file server with HTTP Range support (standard library only), for the web viewer.

  tests/web/range_server.py DIRECTORY [--port PORT] [--bind ADDRESS] [--no-range]

Python's `http.server` ignores `Range` and answers 200 with the whole file; atlases
stream with range requests, so this server answers `Range: bytes=A-B` (one range; also
`A-` and `-N`) with 206 and `Content-Range`, 416 past the end, and keep-alive
connections (HTTP/1.1) on several threads. `--no-range` makes it ignore `Range` as
`http.server` does (the viewer must then say that the server cannot stream). Serves on
127.0.0.1 only by default; prints `serving DIRECTORY on http://ADDRESS:PORT/` once
listening (PORT 0: a free port, printed).
"""

import argparse
import http.server
import os
import re
import sys

RANGE = re.compile(r"^bytes=(\d*)-(\d*)$")


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    honour_range = True

    def log_message(self, format, *args):  # noqa: A002 (http.server's signature)
        sys.stderr.write("%s %s\n" % (self.log_date_time_string(), format % args))

    def end_headers(self):
        self.send_header("Accept-Ranges", "bytes" if self.honour_range else "none")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def send_head(self):
        wanted = self.headers.get("Range")
        if not wanted or not self.honour_range:
            return super().send_head()
        path = self.translate_path(self.path)
        if os.path.isdir(path):
            return super().send_head()
        m = RANGE.match(wanted.strip())
        try:
            f = open(path, "rb")
        except OSError:
            self.send_error(404, "File not found")
            return None
        size = os.fstat(f.fileno()).st_size
        if not m or (not m.group(1) and not m.group(2)):
            f.close()
            self.send_error(400, "Only one byte range (bytes=A-B) is supported")
            return None
        if m.group(1):
            start = int(m.group(1))
            end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
        else:
            start, end = max(size - int(m.group(2)), 0), size - 1
        if start >= size or end < start:
            f.close()
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{size}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        self.send_response(206)
        self.send_header("Content-Type", self.guess_type(path))
        self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        f.seek(start)
        self._left = end - start + 1
        return f

    def copyfile(self, source, outputfile):
        left = getattr(self, "_left", None)
        if left is None:
            return super().copyfile(source, outputfile)
        self._left = None
        while left > 0:
            chunk = source.read(min(left, 1 << 16))
            if not chunk:
                break
            outputfile.write(chunk)
            left -= len(chunk)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("directory")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--bind", default="127.0.0.1")
    parser.add_argument("--no-range", action="store_true", help="ignore Range headers (answer 200)")
    args = parser.parse_args()
    directory = os.path.abspath(args.directory)

    class Served(Handler):
        honour_range = not args.no_range

        def __init__(self, *a, **kw):
            super().__init__(*a, directory=directory, **kw)

    server = http.server.ThreadingHTTPServer((args.bind, args.port), Served)
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(f"serving {directory} on http://{host}:{port}/", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
