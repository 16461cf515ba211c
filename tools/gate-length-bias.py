#!/usr/bin/env python3
"""Each epoch's CPU-bound count against the length of its gate: `tools/gate-length-bias.py
RUNS [DIAL9-BPF ARGS]`.

Runs the demo as a plain release build (build/demo-nofp, 3 workers on the machine's CPUs, mix
mode) RUNS times, profiles each for 20 s with build/dial9-bpf (D9_TOOL=PATH another build) and
the given arguments (e.g. `--overhead-budget 0.4` for gates under a millisecond), and prints
the CPU tasks' count over the demo's own count for every epoch past the first two, binned by
the epoch's gate length: mean and standard deviation per bin. A bin whose mean is off 1 says
gates of that length see the workers' mix other than the epoch does (the attach's stall and
the burst after it fill a short gate's first milliseconds). Root.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import DEMO_NOFP, Demo, read_metadata, remove_tmpdirs, run_tool, tmpdir  # noqa: E402

BINS = ((0, 1), (1, 2), (2, 4.5), (4.5, 10), (10, 1000))


def one_run(extra):
    """[(gate ms, CPU tasks counted over the truth)] for one run's epochs past the second."""
    d = Demo(binary=DEMO_NOFP, workers=3, mode="mix")
    try:
        d.wait_seconds(2)
        out = tmpdir("d9gate-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 20, "--output", out, *extra,
                              timeout=80, windows=True)
        if rc:
            raise SystemExit(err[-800:])
        d.wait_seconds(1)
        truth = d.seconds()
    finally:
        d.stop()
    meta = read_metadata(out)
    cpu = {}
    for c in meta["count_terms"]:
        if "cpu_kind" in (c["future"] or ""):
            cpu[c["epoch"]] = cpu.get(c["epoch"], 0) + c["sum"]
    return [(e["gate_ms"], cpu.get(e["epoch"], 0) / truth[e["epoch"]]["resumes"]["cpu"])
            for e in meta["overhead"]["epochs"][2:-1] if e["epoch"] in truth], meta


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    rows = []
    for i in range(int(sys.argv[1])):
        got, meta = one_run(sys.argv[2:])
        rows += got
        print(f"run {i + 1}: {len(got)} epochs, estimated cost "
              f"{meta['overhead']['est_overhead_pct']:.2f}%", flush=True)
    for lo, hi in BINS:
        xs = [r for g, r in rows if lo <= g < hi]
        if len(xs) > 1:
            print(f"gate {lo}-{hi} ms: {len(xs)} epochs, counted over truth mean "
                  f"{statistics.mean(xs):.2f}, sd {statistics.stdev(xs):.2f}")
    xs = [r for _, r in rows]
    print(f"all: {len(xs)} epochs, mean {statistics.mean(xs):.2f}, sd {statistics.stdev(xs):.2f}")


if __name__ == "__main__":
    try:
        main()
    finally:
        remove_tmpdirs()
