#!/usr/bin/env python3
"""A probe hit's price in the target, from the slowdown of probing every poll:
`tools/hit-price.py WORKERS [RUNS]`.

Starts build/demo-fp with WORKERS workers (0: current_thread) running only CPU-bound tasks of
short polls (64 tasks, 200 units of work a poll, so that hits are a large share of a poll),
and RUNS times (2 by default) counts their resumes a second for 8 s unprobed, then for 8 s
with build/dial9-bpf (D9_TOOL: another build) probing every poll (--overhead-budget 100). The
CPUs the demo keeps busy (D9_CPUS, 2 by default) over each rate is the CPU time of a resume,
and the difference, over the hits a resume takes, the CPU time of a hit: what the windows'
hit-cost measurement estimates from lean windows. Prints it beside the tool's own price
(`probe_hit_cost_ns` in metadata.json). Root.
"""
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Demo, read_metadata, run_tool  # noqa: E402

SECS = 8


def cpu_rate(demo, lo, hi):
    """Mean CPU-bound resumes a second over the demo's whole seconds lo..hi."""
    vals = [s["resumes"]["cpu"] for k, s in demo.seconds().items() if lo <= k <= hi]
    assert vals, "no demo seconds in range"
    return sum(vals) / len(vals)


def one_run(demo, cpus):
    before = max(demo.seconds())
    demo.wait_seconds(SECS)
    base = cpu_rate(demo, before + 2, before + SECS)
    out = tempfile.mkdtemp(prefix="d9price-")
    rc, _, err = run_tool("--pid", demo.pid, "--duration", SECS + 2, "--output", out,
                          "--overhead-budget", 100, timeout=SECS + 60)
    assert rc == 0, err[-2000:]
    meta = read_metadata(out)
    lo = meta["sampling_started_at_ns"] // 10**9 + 1
    hi = meta["sampling_stopped_at_ns"] // 10**9 - 1
    armed = cpu_rate(demo, lo, hi)
    run_s = (meta["sampling_stopped_at_ns"] - meta["sampling_started_at_ns"]) / 1e9
    hits = meta["counters"]["probe_hits"] / run_s
    per_hit = (cpus / armed - cpus / base) * armed / hits * 1e9
    price = meta["overhead"]["probe_hit_cost_ns"]
    return (f"resumes a second unprobed {base:.0f}, probed {armed:.0f}; {hits / armed:.2f} "
            f"hits a resume; a hit {per_hit:.0f} ns; the tool's price {price['per_hit']:.0f} "
            f"(calibration {price['emulated'] + price['program_run']:.0f}, lean windows: none "
            f"when probing every poll)")


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    workers, runs = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 2
    cpus = float(os.environ.get("D9_CPUS", "2"))
    demo = Demo("--cpu-tasks", "64", "--cpu-iters", "200", "--timer-tasks", "0",
                "--channel-tasks", "0", "--blocking-tasks", "0", workers=workers)
    try:
        demo.wait_seconds(3)
        for _ in range(runs):
            print(f"{workers} workers: {one_run(demo, cpus)}", flush=True)
    finally:
        demo.stop()


if __name__ == "__main__":
    main()
