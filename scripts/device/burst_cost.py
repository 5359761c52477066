#!/usr/bin/env python3
"""What a burst adds to each frame, against the same frame without the burst.

    burst_cost.py FLUSHED.json UNFLUSHED.json

Both are `tessera bench --json` reports of one camera path with the same settings, the
first with `--flush-every N`, the second without. The camera paths are functions of
the frame number, so frame i shows the same view in both runs. A burst frame (from a
flush on, while tiles are uploaded: the bench's own definition) is compared with frame
i of the unflushed run, where the pool is warm: the difference is the burst's cost on
that view. The bench's own "over the idle" figure compares burst frames with the few
frames that uploaded nothing, which come at other views of the path (their scene pass
can be 0.2 ms cheaper), and with a slice that spreads each burst over 8-10 of 10
frames, there are few such frames (2 to 30 in a run).

Frame cost is the bench's: CPU plus submit-to-idle wall time, ms.
"""
import json
import sys


def cost(f):
    return f["vt_cpu_ms"] + f["vt_wall_ms"]


def written(f):
    s = f["stream"]
    return s["uploads"] + s.get("produced", 0) + s.get("refreshed", 0)


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    flushed, warm = (json.load(open(p)) for p in sys.argv[1:])
    base = {f["frame"]: f for f in warm["per_frame"]}
    deltas = [cost(f) - cost(base[f["frame"]]) for f in flushed["per_frame"]
              if f["after_flush"] and written(f) > 0 and f["frame"] in base]
    if not deltas:
        sys.exit("no burst frames to compare")
    b = flushed["uploads"].get("burst") or {}
    own = b.get("over_idle_ms")
    print(f"burst frames {len(deltas)}: over the same frame unflushed, median {pct(deltas, 0.5):.3f} ms, "
          f"p95 {pct(deltas, 0.95):.3f} ms, max {max(deltas):.3f} ms"
          + (f" (bench's own over idle: {own[0]:.3f} / {own[1]:.3f})" if own else ""))


main()
