#!/usr/bin/env python3
"""How the sampling windows disturb what they count: `tools/window-truth.py WORKERS SECONDS
[DEMO ARGS]`.

Starts build/demo-fp (D9_DEMO=PATH another build; mix mode; WORKERS 0: a current_thread
runtime) with --trace-resumes, so that every
counted resume's CLOCK_MONOTONIC time is known, profiles it with `build/dial9-bpf -v` for
SECONDS, whose stderr gives each window's attach start and gate, and prints for each async fn
of the demo its true resumes per second inside the sampling windows' gates, during their
attach (from the attach's start to the gate) and in the 20 ms after each gate (the probes come
out), each over its mean rate across the run; then the tool's estimate from the in-window
counts over the truth (clean epochs). A gate ratio under 1 says the windows slow that task
down, and the counts, made inside the gates, see that slower rate: the estimate then reads as
low as the gate ratio. A second table splits the same rates by time from the gate's opening
(the 2 ms before it are the attach's end): where an attach stalls the target, the work it held
up runs in the gate's first milliseconds and is counted there. Last, the CPU-bound tasks'
in-window slowdown that would have counted them right against the one the tool measured (its
price of a hit moves the second). D9_TOOL_ARGS adds arguments to the tool's (e.g.
"--per-worker-hz 50"). Root.
"""
import bisect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import DEMO_FP, TOOL, clean_epochs, counted_by_fn, read_metadata  # noqa: E402

WINDOW = re.compile(r"window: (\w+), attach from (\d+), gate (\d+)-(\d+) ns")
AFTER_NS = 20_000_000
# Spans from the gate's opening, in ms; a span past a window's gate counts only up to it.
BINS_MS = ((-2, -1), (-1, 0), (0, 1), (1, 2), (2, 4), (4, 8), (8, 16), (16, 32), (32, 64),
           (64, 128))


def run(workers, secs, demo_args, tmp):
    trace = os.path.join(tmp, "resumes.txt")
    demo_out = os.path.join(tmp, "demo.jsonl")
    with open(demo_out, "w") as out:
        demo = subprocess.Popen([os.environ.get("D9_DEMO") or DEMO_FP, "--workers", str(workers),
                                 "--mode", "mix", "--duration", str(secs + 6),
                                 "--trace-resumes", trace, *demo_args],
                                stdout=out, stderr=subprocess.DEVNULL)
        time.sleep(3)
        tool = subprocess.run([TOOL, "--pid", str(demo.pid), "-d", str(secs), "-v", "--quiet",
                               "-o", os.path.join(tmp, "profile"),
                               *os.environ.get("D9_TOOL_ARGS", "").split()],
                              capture_output=True, text=True, timeout=secs + 60)
        demo.wait(timeout=60)
    with open(os.path.join(tmp, "dial9-bpf.stderr"), "w") as f:
        f.write(tool.stderr)
    if tool.returncode:
        sys.exit(f"dial9-bpf exited {tool.returncode}: {tool.stderr[-800:]}")
    windows = [(int(a), int(g0), int(g1)) for kind, a, g0, g1 in WINDOW.findall(tool.stderr)
               if kind == "sampling"]
    truth = {}
    with open(demo_out) as f:
        for line in f:
            d = json.loads(line)
            if d.get("type") == "second":
                truth[d["sec"]] = d
    times = {}
    with open(trace) as f:
        for line in f:
            t, fn = line.split()
            times.setdefault(fn, []).append(int(t))
    return windows, times, truth, read_metadata(os.path.join(tmp, "profile"))


def ratios(ts, windows):
    """In-gate, attach and after-gate rates of the sorted times ts over their mean rate from
    the first attach to the last gate's end."""
    def count(a, b):
        return bisect.bisect_left(ts, b) - bisect.bisect_left(ts, a)
    span = (windows[0][0], windows[-1][2])
    mean = count(*span) / (span[1] - span[0])

    def ratio(intervals):
        length = sum(b - a for a, b in intervals)
        return sum(count(a, b) for a, b in intervals) / (mean * length) if mean else 0
    return (ratio([(g0, g1) for _, g0, g1 in windows]),
            ratio([(a, g0) for a, g0, _ in windows]),
            ratio([(g1, g1 + AFTER_NS) for _, _, g1 in windows]))


def by_gate_time(ts, windows):
    """The rate of the sorted times ts in each of BINS_MS from the gates' openings, over their
    mean rate from the first attach to the last gate's end; None where no window reaches."""
    def count(a, b):
        return bisect.bisect_left(ts, b) - bisect.bisect_left(ts, a)
    mean = count(windows[0][0], windows[-1][2]) / (windows[-1][2] - windows[0][0])
    out = []
    for lo, hi in BINS_MS:
        n = length = 0
        for _, g0, g1 in windows:
            a, b = g0 + lo * 1_000_000, g0 + hi * 1_000_000
            if lo >= 0:
                b = min(b, g1)
            if b > a:
                n += count(a, b)
                length += b - a
        out.append(n / (mean * length) if mean and length else None)
    return out


def slowdown_check(ts, windows, meta):
    """Per epoch, the yielded tasks' slowdown that would have counted the sorted resume times ts
    right (their rate in the gates over the epoch's, over the gates' share of the workers' CPU
    time against the epoch's: what the coverage divides by) against the one the tool measured
    (the workers' window_slowdown, each weighed by its time on the CPU in the gates, as their
    counts are); medians over the epochs."""
    oncpu, weighed = {}, {}
    for w in meta["workers"]:
        for e in w["epochs"]:
            on, s = e.get("window_oncpu_ms") or 0, e.get("window_slowdown") or 0
            oncpu[e["epoch"]] = oncpu.get(e["epoch"], 0) + on
            if on and s:
                weighed[e["epoch"]] = weighed.get(e["epoch"], 0) + on / s
    needed, measured = [], []
    for e in meta["overhead"]["epochs"]:
        lo, hi = e["epoch"] * 10**9, (e["epoch"] + 1) * 10**9
        gates = [(g0, g1) for _, g0, g1 in windows if lo <= g0 < hi]
        gate_ns = sum(g1 - g0 for g0, g1 in gates)
        total = bisect.bisect_left(ts, hi) - bisect.bisect_left(ts, lo)
        if not (gate_ns and total and e.get("worker_cpu_ms") and oncpu.get(e["epoch"])):
            continue
        inside = sum(bisect.bisect_left(ts, g1) - bisect.bisect_left(ts, g0) for g0, g1 in gates)
        rate = inside / gate_ns / (total / 1e9)
        cpu = oncpu[e["epoch"]] / (gate_ns / 1e6) / (e["worker_cpu_ms"] / 1000)
        needed.append(rate / cpu)
        measured.append(oncpu[e["epoch"]] / weighed[e["epoch"]] if weighed.get(e["epoch"]) else 1)
    return (statistics.median(needed), statistics.median(measured)) if needed else None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    workers, secs = int(sys.argv[1]), int(sys.argv[2])
    tmp = tempfile.mkdtemp(prefix="d9-window-truth-")
    windows, times, truth, meta = run(workers, secs, sys.argv[3:], tmp)
    if not windows:
        sys.exit("window-truth: no sampling windows (always armed?)")
    for ts in times.values():
        ts.sort()
    counted = counted_by_fn(meta, truth, clean_epochs(meta) & set(truth))
    gate_ms = sum(g1 - g0 for _, g0, g1 in windows) / 1e6
    print(f"{workers} workers, {secs} s: {len(windows)} sampling windows, gates {gate_ms:.0f} ms "
          f"in all; output {tmp}")
    print(f"{'async fn':24s} {'resumes/s':>9s} {'gate':>5s} {'attach':>6s} {'after':>5s} "
          f"{'counted':>7s}")
    for fn, ts in sorted(times.items()):
        if len(ts) < 100 * secs:
            continue
        gate, attach, after = ratios(ts, windows)
        est, real = counted.get(fn, (0, 0))
        print(f"{fn:24s} {len(ts) / (secs + 6):9.0f} {gate:5.2f} {attach:6.2f} {after:5.2f} "
              f"{est / real if real else 0:7.2f}")
    print("\nrate over the mean, by ms from the gate's opening")
    print(f"{'async fn':24s} " + " ".join(f"{f'{lo}..{hi}':>6s}" for lo, hi in BINS_MS))
    for fn, ts in sorted(times.items()):
        if len(ts) < 100 * secs:
            continue
        print(f"{fn:24s} " + " ".join("     -" if r is None else f"{r:6.2f}"
                                      for r in by_gate_time(ts, windows)))
    cpu = times.get("cpu_kind_task")
    check = slowdown_check(cpu, windows, meta) if cpu else None
    if check:
        p = meta["overhead"].get("probe_hit_cost_ns") or {}
        print(f"\nCPU-bound tasks' in-window slowdown, median by epoch: {check[0]:.3f} needed, "
              f"{check[1]:.3f} measured (a hit priced at {p.get('per_hit') or 0:.0f} ns, "
              f"relative standard error {p.get('per_hit_rel_se') or 0:.2f})")


if __name__ == "__main__":
    main()
