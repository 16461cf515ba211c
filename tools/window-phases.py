#!/usr/bin/env python3
"""Where each window's probe hits fall: `tools/window-phases.py RUNS [DIAL9-BPF ARGS]`.

Runs the demo as a plain release build (build/demo-nofp, D9_WORKERS workers, 3 by default, mix
mode; D9_DEMO=hot for the hot demo) once, profiles it RUNS times for 10 s with build/dial9-bpf
(D9_TOOL=PATH another build) and the given arguments, and prints per window the hits in the
gate and those each window costs outside it (`probe_hits_attaching`, `probe_hits_settling`,
`probe_hits_detaching` in metadata.json), with the share of the time the gates were open and
the tool's estimated cost. The hits outside the gate buy no sample: the budget pays for them
before the gates. Root.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import DEMO_NOFP, Demo, read_metadata, remove_tmpdirs, run_tool, tmpdir  # noqa: E402

PHASES = ("in_gate", "attaching", "settling", "detaching")


def one_run(pid, extra):
    out = tmpdir("d9phase-")
    rc, _, err = run_tool("--pid", pid, "--duration", 10, "--output", out, "--cpu-hz", 0, *extra,
                          timeout=60, windows=True)
    if rc:
        raise SystemExit(err[-800:])
    meta = read_metadata(out)
    c, windows = meta["counters"], meta["overhead"]["windows"]
    return {k: c[f"probe_hits_{k}"] / windows for k in PHASES}, meta


def main():
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    d = Demo(binary=DEMO_NOFP, workers=int(os.environ.get("D9_WORKERS", "3")),
             mode=os.environ.get("D9_DEMO", "mix"))
    rows = []
    try:
        d.wait_seconds(2)
        for i in range(int(sys.argv[1])):
            per, meta = one_run(d.pid, sys.argv[2:])
            rows.append(per)
            hit = meta["overhead"]["probe_hit_cost_ns"]["per_hit"]
            print(f"run {i + 1}: per window " + ", ".join(f"{k} {v:.0f}" for k, v in per.items())
                  + f"; {meta['overhead']['windows']} windows, armed "
                  f"{100 * meta['overhead']['armed_fraction']:.2f}% of the time, a hit "
                  f"{hit / 1000:.1f} us, estimated cost {meta['overhead']['est_overhead_pct']:.2f}%",
                  flush=True)
    finally:
        d.stop()
    outside = [(r["attaching"] + r["settling"] + r["detaching"]) / r["in_gate"] for r in rows
               if r["in_gate"]]
    detach = [r["detaching"] / r["in_gate"] for r in rows if r["in_gate"]]
    if outside:
        print(f"outside the gate over in it: median {statistics.median(outside):.2f} "
              f"({min(outside):.2f}-{max(outside):.2f}); detaching alone "
              f"{statistics.median(detach):.2f} ({min(detach):.2f}-{max(detach):.2f})")
    remove_tmpdirs()


if __name__ == "__main__":
    main()
