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
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
from harness import TOOL, Demo, read_metadata  # noqa: E402
from test_push import Receiver  # noqa: E402


def thread_cpu(pid, name):
    """CPU seconds of the tool's thread called name (0 when gone or absent)."""
    tick = os.sysconf("SC_CLK_TCK")
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                if f.read().strip() != name:
                    continue
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / tick
    except OSError:
        pass
    return 0.0


def run(args):
    """The tool's CPU (rusage of the finished child) and its sending thread's (read from /proc
    every 0.2 s while it runs: the last reading before the thread ends)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.Popen([TOOL, *map(str, args)], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    sender = 0.0
    while p.poll() is None:
        sender = max(sender, thread_cpu(p.pid, "d9-push"))
        time.sleep(0.2)
    err = p.stderr.read()
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit(f"dial9-bpf exited {p.returncode}: {err[-800:]}")
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, sender


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--interval", type=int, default=15)
    ap.add_argument("--rounds", type=int, default=1)
    a = ap.parse_args()
    demo = Demo(workers=a.workers, mode="mix")
    rec = Receiver()
    outs = []
    try:
        demo.wait_seconds(1)
        for r in range(a.rounds):
            res = {}
            for push in (True, False):
                out = tempfile.mkdtemp(prefix="d9bench-push-")
                outs.append(out)
                extra = ["--push", rec.url(), "--push-interval", a.interval] if push else []
                res[push] = (*run(["--pid", demo.pid, "-d", a.seconds, "-o", out, "-q",
                                   *extra]), out)
            p = read_metadata(res[True][2])["push"]
            sizes = [len(q[2]) for q in rec.requests[-p["sent"]:]]
            full = sizes[1:-1] or sizes  # the first and last intervals are partial
            per = sum(full) / len(full)
            print(f"round {r}: {a.workers} workers, {a.seconds} s: tool CPU with push "
                  f"{res[True][0]:.3f} s (sending thread {res[True][1]:.2f} s), without "
                  f"{res[False][0]:.3f} s; "
                  f"{p['intervals']} intervals, {p['samples']} samples, bytes per whole "
                  f"{a.interval} s interval {per:.0f} (max {max(sizes)}), latency mean "
                  f"{p['latency_ms_mean']:.2f} ms max {p['latency_ms_max']:.2f} ms; "
                  f"10-min outage ~{per * 600 / a.interval / 1024:.0f} KiB of spool")
            time.sleep(1)
    finally:
        rec.close()
        demo.stop()
        for d in outs:
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
