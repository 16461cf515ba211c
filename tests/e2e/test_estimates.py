"""Estimates at the defaults (armed windows) against the demo's own counts: no ramp, tasks that
resume about once a second, and the 95% intervals the report prints."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from harness import (Demo, clean_epochs, counted_vs_truth, delivery, estimate_vs_truth,
                     read_metadata, read_samples, run_all, run_tool, test, tmpdir)

import importlib.util  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "coverage", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                             "interval-coverage.py"))
coverage_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(coverage_tool)


def profile(demo_args, secs, *extra):
    d = Demo(*demo_args, workers=2, mode="mix")
    try:
        d.wait_seconds(2)
        out = tmpdir("d9est-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", secs, "--output", out, *extra,
                              timeout=secs + 60, windows=True)
        assert rc == 0, err[-800:]
        d.wait_seconds(1)
        return read_samples(out), read_metadata(out), d.seconds()
    finally:
        d.stop()


@test
def rarely_resuming_tasks_estimated():
    """3000 tasks that each sleep about a second: every resume is eligible (a task first seen
    in a window with an id below Tokio's next id is a resume), so they are sampled and their
    estimate is near their count. Also: no ramp (the second epoch's duty is planned from the
    first one's costs, not doubled from a floor), and the cap rarely binds. The estimate of
    each task type from the in-window counts (count_terms) is checked the same way."""
    samples, meta, truth = profile(["--idle-tasks", "3000"], 20)
    nepochs, kinds = estimate_vs_truth(samples, meta, truth)
    counted = counted_vs_truth(meta, truth, clean_epochs(meta) & set(truth))
    res = [f"{k} {g / r:.2f} counted {counted.get(k, 0) / r:.2f} (n={c})"
           for k, (g, r, c) in kinds.items() if r]
    got, real, n = kinds["idle"]
    assert n >= 10, f"only {n} samples of the idle tasks: " + "; ".join(res)
    assert 0.6 <= got / real <= 1.6, "; ".join(res)
    assert 0.6 <= counted.get("idle", 0) / real <= 1.6, "; ".join(res)
    duties = [e["duty"] for e in meta["overhead"]["epochs"]]
    later = sorted(duties[2:])
    assert duties[1] >= 0.4 * later[len(later) // 2], f"a ramp: duties {duties}"
    rates, capped, of = delivery(meta)
    assert capped <= 0.1 * of, f"{capped} of {of} worker-epochs capped"
    return (f"{nepochs} epochs: " + "; ".join(res) + f"; per-worker samples/s "
            + ", ".join(f"{r:.1f}" for r in rates) + f"; capped {capped} of {of}; "
            f"duty 2nd epoch {duties[1]:.4f}, median later {later[len(later) // 2]:.4f}")


@test
def intervals_cover_the_truth():
    """The report's 95% intervals (windows as the drawn units, Student's t): over 8 disjoint
    4 s spans of one run, the demo's count of each kind lies inside in most of them (a right
    interval misses 1 in 20; 5 of 8 or fewer happens by chance about once in 1000 runs). The
    variance terms in metadata (estimate_terms) add up to the samples' weights."""
    nseg, secs = 8, 4
    samples, meta, truth = profile([], nseg * secs + 2)
    terms = {}
    for t in meta["estimate_terms"]:
        terms[t["future"]] = terms.get(t["future"], 0) + t["sum"]
    sums = {}
    for smp in samples:
        sums[smp.get("future")] = sums.get(smp.get("future"), 0) + smp["weight_count"]
    assert terms == sums, f"estimate_terms {terms} != the samples' weights {sums}"
    rows = coverage_tool.coverage(samples, meta, truth, nseg, secs)
    assert len(rows) >= 6, f"only {len(rows)} spans with clean epochs"
    res = []
    for kind in coverage_tool.KINDS:
        inside = sum(1 for r in rows if abs(r[kind][0] - r[kind][2]) <= r[kind][1])
        res.append(f"{kind} {inside} of {len(rows)}")
        assert inside >= len(rows) - 3, "; ".join(res)
    return "truth inside: " + "; ".join(res)


if __name__ == "__main__":
    run_all()
