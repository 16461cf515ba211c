#!/usr/bin/env python3
"""The first whole epoch after an attach at a chosen point of a second:
`tools/first-epoch.py PHASE_MS [RUNS]`.

Starts build/demo-fp (mix mode, D9_WORKERS workers, 32 by default, with 64 CPU-bound tasks),
and RUNS times (3 by default) starts build/dial9-bpf (D9_TOOL: another build) at the defaults
for 5 s so that it begins PHASE_MS into a second of CLOCK_MONOTONIC (its start-up delays the
first window by a few hundred ms more: the attach's point is printed). Prints, for the first
whole epoch and the next, the workers with a record, how many of them calibrated (selected
nothing), the samples selected and the worker-epochs capped. Root.
"""
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Demo, read_metadata, run_tool  # noqa: E402


def wait_for_phase(ms):
    now = time.clock_gettime(time.CLOCK_MONOTONIC) % 1
    time.sleep((ms / 1000 - now) % 1)


def first_epochs(meta):
    started = meta["sampling_started_at_ns"]
    first = started // 10**9 + 1
    rows = []
    for epoch in (first, first + 1):
        eps = [e for w in meta["workers"] for e in w["epochs"] if e["epoch"] == epoch]
        rows.append(f"epoch +{epoch - first + 1}: {len(eps)} workers, "
                    f"{sum(e['calibrating'] for e in eps)} calibrating, "
                    f"{sum(e['selected'] for e in eps)} selected, "
                    f"{sum(e['capped'] for e in eps)} capped")
    return f"attach {started % 10**9 / 1e6:.0f} ms into its second; " + "; ".join(rows)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    phase, runs = int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 3
    d = Demo("--cpu-tasks", "64", workers=int(os.environ.get("D9_WORKERS", "32")), mode="mix")
    try:
        d.wait_seconds(2)
        for _ in range(runs):
            out = tempfile.mkdtemp(prefix="d9-first-")
            wait_for_phase(phase)
            rc, _, err = run_tool("--pid", d.pid, "--duration", 5, "--output", out,
                                  timeout=60, windows=True)
            if rc:
                sys.exit(f"dial9-bpf exited {rc}: {err[-800:]}")
            print(first_epochs(read_metadata(out)))
    finally:
        d.stop()


if __name__ == "__main__":
    main()
