#!/usr/bin/env python3
"""--push figures: `tools/bench-push.py [--workers 8] [--seconds 60] [--interval 15] [--rounds 1]`

One demo; per round, dial9-bpf runs SECONDS with its defaults (1% budget, 10 Hz per worker)
twice, in rotation: with --push to a loopback receiver written to Pyroscope's /ingest API
(tests/e2e/test_push.py's), and without. Prints the tool's CPU (user + sys, rusage of the
finished child) of each, and from the push run's metadata.json the bytes per interval, the
request latency (loopback: the tool's side of a push, not a network's) and what a 10-minute
outage would leave in the spool (bytes per interval x intervals in 10 minutes: an
extrapolation, not a measured outage). Root.
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from harness import TOOL, Demo, read_metadata  # noqa: E402
from test_push import Receiver  # noqa: E402


def run(args):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run([TOOL, *map(str, args)], stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit(f"dial9-bpf exited {p.returncode}: {p.stderr[-800:]}")
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--interval", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    demo = Demo(workers=a.workers, mode="mix")
    rec = Receiver()
    try:
        demo.wait_seconds(1)
        for r in range(a.rounds):
            res = {}
            for push in (True, False):
                out = tempfile.mkdtemp(prefix="d9bench-push-")
                extra = ["--push", rec.url(), "--push-interval", a.interval] if push else []
                res[push] = (run(["--pid", demo.pid, "-d", a.seconds, "-o", out, "-q",
                                  *extra]), out)
            p = read_metadata(res[True][1])["push"]
            sizes = [len(q[2]) for q in rec.requests[-p["sent"]:]]
            full = sizes[1:-1] or sizes  # the first and last intervals are partial
            per = sum(full) / len(full)
            print(f"round {r}: {a.workers} workers, {a.seconds} s: tool CPU with push "
                  f"{res[True][0]:.3f} s, without {res[False][0]:.3f} s; "
                  f"{p['intervals']} intervals, {p['samples']} samples, bytes per whole "
                  f"{a.interval} s interval {per:.0f} (max {max(sizes)}), latency mean "
                  f"{p['latency_ms_mean']:.2f} ms max {p['latency_ms_max']:.2f} ms; "
                  f"10-min outage ~{per * 600 / a.interval / 1024:.0f} KiB of spool")
            time.sleep(1)
    finally:
        rec.close()
        demo.stop()


if __name__ == "__main__":
    main()
