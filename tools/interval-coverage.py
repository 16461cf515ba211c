#!/usr/bin/env python3
"""Coverage of the 95% intervals: `tools/interval-coverage.py SEGMENTS SECONDS [ARGS]`.

Starts build/demo-fp (`--mode mix`, 2 workers), profiles it once at the defaults (extra
dial9-bpf ARGS after SECONDS, e.g. --per-worker-hz 50) for SEGMENTS x SECONDS seconds, cuts the
run into SEGMENTS disjoint spans of SECONDS epochs and treats each as a run of its own: per
demo task kind, the Horvitz-Thompson estimate over the span's clean epochs, its 95% interval
with the armed windows as the drawn clusters (the design of docs/design.md; dial9-bpf report
prints the same), and whether the demo's own count lies inside. Spans are seconds apart, so
their estimates are close to independent: with a right interval, about 19 in 20 cover the
truth. `tools/interval-coverage.py --runs RUNS SECONDS [ARGS]` makes RUNS separate runs of
the tool on one demo instead, each of SECONDS whole epochs (one span a run, from attach to
exit). Root. D9_DEMO_ARGS adds arguments to the demo's; D9_WORKERS sets its worker count (0: a
current_thread runtime).
"""
import json
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import (Demo, clean_epochs, future_kind, kind_of, read_metadata,  # noqa: E402
                     read_samples, run_tool)

KINDS = ("cpu", "timer", "channel")


def windows_in(meta, epochs):
    return sum(e["windows"] for e in meta["overhead"]["epochs"] if e["epoch"] in epochs)


T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def t975(df):
    """Student's t at 97.5%, as dial9-bpf report uses it."""
    return T975[df - 1] if df <= len(T975) else 1.96 + 2.4 / df


def price_rel(meta, epochs, kind):
    """The relative standard error the hit price's error gives this kind's weights over the
    epochs: its counts' price_se over their sum (as `dial9-bpf report` takes it per type)."""
    total = price = 0.0
    for c in meta.get("count_terms") or []:
        if c["epoch"] in epochs and future_kind(c["future"]) == kind:
            total += c["sum"]
            price += c.get("price_se", 0)
    return price / total if total > 0 else 0.0


def interval(samples, m, kind, rel=0.0):
    """(estimate, half width of the 95% interval): clusters are windows; m windows in all, those
    that drew nothing of this kind counting with a total of 0; rel, the hit price's relative
    error in the weights (price_rel), moves them all together."""
    z = {}
    for i, s in enumerate(samples):
        if kind_of(s) == kind:
            c = s.get("window", ("alone", i))
            z[c] = z.get(c, 0) + 1 / s["inclusion_probability"]
    total = sum(z.values())
    m = max(m, len(z))
    if m < 2:
        return total, math.nan
    var = m / (m - 1) * (sum(v * v for v in z.values()) - total * total / m)
    return total, t975(m - 1) * math.sqrt(max(var, 0) + (total * rel) ** 2)


def interval_counted(meta, epochs, m, kind):
    """The same from the in-window counts (count_terms): each (epoch, type) cell carries the
    sum and sum of squares of its windows' totals, the counts' edge terms (added as they
    are) and the price's error (price_se: summed, then squared, as it moves every epoch
    alike). A kind of several types is one window's total where its epoch had one window;
    otherwise their squares add apart, leaving out the cross terms of a window that saw
    both."""
    one = {e["epoch"] for e in meta["overhead"]["epochs"] if e["windows"] == 1}
    total = sq = edge = price = 0.0
    single = {}
    for c in meta.get("count_terms") or []:
        if c["epoch"] not in epochs or future_kind(c["future"]) != kind:
            continue
        total += c["sum"]
        edge += c.get("edge_sq", 0)
        price += c.get("price_se", 0)
        if c["epoch"] in one:
            single[c["epoch"]] = single.get(c["epoch"], 0) + c["sum"]
        else:
            sq += c["sum_sq"]
    sq += sum(z * z for z in single.values())
    edge += price ** 2
    if m < 2:
        return total, math.nan
    return total, t975(m - 1) * math.sqrt(max(m / (m - 1) * (sq - total * total / m), 0) + edge)


def coverage(samples, meta, truth, nseg, secs):
    """Per segment and kind: (estimate, half width, truth); segments with < 2 clean epochs
    are left out."""
    start = meta["sampling_started_at_ns"] // 10**9 + 1
    rows = []
    for k in range(nseg):
        first, last = start + k * secs, start + (k + 1) * secs - 1
        good = clean_epochs(meta, first, last) & set(truth)
        if len(good) < 2:
            continue
        seg = [s for s in samples if s["epoch"] in good]
        m = windows_in(meta, good)
        row = {}
        for kind in KINDS:
            est, hw = interval(seg, m, kind, price_rel(meta, good, kind))
            real = sum(truth[e]["resumes"].get(kind, 0) for e in good)
            row[kind] = (est, hw, real)
            row[kind + " counted"] = interval_counted(meta, good, m, kind) + (real,)
        rows.append(row)
    return rows


def profile_spans(d, nseg, secs, extra):
    """Profiles the demo once for nseg spans of secs epochs; returns coverage()'s rows."""
    out = tempfile.mkdtemp(prefix="d9-coverage-")
    dur = nseg * secs + 2
    rc, _, err = run_tool("--pid", d.pid, "--duration", dur, "--output", out, *extra,
                          timeout=dur + 60, windows=True)
    if rc:
        sys.exit(f"dial9-bpf exited {rc}: {err[-800:]}")
    d.wait_seconds(1)
    truth = d.seconds()
    with open(os.path.join(out, "truth.json"), "w") as f:
        json.dump(truth, f)  # the demo's own counts per second, for analysis
    rows = coverage(read_samples(out), read_metadata(out), truth, nseg, secs)
    print(f"output {out}: " + "; ".join(
        f"{k} {r[k][0] / r[k][2]:.3f} +- {r[k][1] / r[k][2]:.3f}" for r in rows for k in r
        if k.endswith("counted") and r[k][2]))
    return rows


def main():
    runs = len(sys.argv) > 1 and sys.argv[1] == "--runs"
    args = sys.argv[2:] if runs else sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    n, secs, extra = int(args[0]), int(args[1]), args[2:]
    d = Demo(*os.environ.get("D9_DEMO_ARGS", "").split(),
             workers=int(os.environ.get("D9_WORKERS", "2")), mode="mix")
    try:
        d.wait_seconds(2)
        if runs:
            rows = [r for _ in range(n) for r in profile_spans(d, 1, secs, extra)]
        else:
            rows = profile_spans(d, n, secs, extra)
    finally:
        d.stop()
    if not rows:
        sys.exit("interval-coverage: no span with 2 clean epochs or more")
    for kind in [k + c for k in KINDS for c in ("", " counted")]:
        inside = sum(1 for r in rows if abs(r[kind][0] - r[kind][2]) <= r[kind][1])
        ratios = sorted(r[kind][0] / r[kind][2] for r in rows if r[kind][2])
        rel = sorted(r[kind][1] / r[kind][2] for r in rows if r[kind][2])
        print(f"{kind}: truth inside the 95% interval in {inside} of {len(rows)} "
              f"{'runs' if runs else 'spans'}; est/truth median {ratios[len(ratios) // 2]:.2f} "
              f"({ratios[0]:.2f}-{ratios[-1]:.2f}); half width median "
              f"{100 * rel[len(rel) // 2]:.0f}% of the truth")


if __name__ == "__main__":
    main()
