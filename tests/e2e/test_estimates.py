"""Estimates at the defaults (armed windows) against the demo's own counts: no ramp, tasks that
resume about once a second, and the 95% intervals the report prints."""
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from harness import (DEMO_FP, DEMO_NOFP, Demo, check_or_known, clean_epochs, counted_se,
                     counted_vs_truth, delivery, estimate_vs_truth, read_metadata, read_samples,
                     run_all, run_tool, test, tmpdir)

import importlib.util  # noqa: E402

import test_flavours as tf  # noqa: E402
import test_tokio_matrix as tm  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "coverage", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools",
                             "interval-coverage.py"))
coverage_tool = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(coverage_tool)


def profile(demo_args, secs, *extra, workers=2, binary=DEMO_FP):
    d = Demo(*demo_args, binary=binary, workers=workers, mode="mix")
    try:
        d.wait_seconds(2)
        out = tmpdir("d9est-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", secs, "--output", out, *extra,
                              timeout=secs + 60, windows=True)
        assert rc == 0, err[-800:]
        profile.stderr = err
        d.wait_seconds(1)
        truth = d.seconds()
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump(truth, f)  # beside the outputs D9_KEEP_OUTPUT keeps
        return read_samples(out), read_metadata(out), truth
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
    # A dozen or two samples of the idle tasks give an estimate within about +-50% (95%); the
    # check is the estimate's own 99.9% interval, widened from the 95% one the report prints,
    # so that a right estimator fails about once in 1000 runs. The width is taken at the
    # truth: the variance measured grows with the count drawn, as a Poisson count's does, so
    # a run that drew few samples measures an interval too narrow to test it by (and one that
    # drew many, too wide).
    good = clean_epochs(meta) & set(truth)
    m = coverage_tool.windows_in(meta, good)
    _, hw = coverage_tool.interval([s for s in samples if s["epoch"] in good], m, "idle",
                                   coverage_tool.price_rel(meta, good, "idle"))
    _, hwc = coverage_tool.interval_counted(meta, good, m, "idle")
    res.append(f"idle 95% half widths: samples {hw / real:.2f}, counts {hwc / real:.2f}")
    for est, width in ((got, hw), (counted.get("idle", 0), hwc)):
        at_truth = width * math.sqrt(real / est) if est > 0 else 0
        assert abs(est - real) <= 1.68 * at_truth, "; ".join(res)
    duties = [e["duty"] for e in meta["overhead"]["epochs"]]
    later = sorted(duties[2:])
    assert duties[1] >= 0.4 * later[len(later) // 2], f"a ramp: duties {duties}"
    rates, capped, of = delivery(meta)
    assert capped <= 0.1 * of, f"{capped} of {of} worker-epochs capped"
    return (f"{nepochs} epochs: " + "; ".join(res) + f"; per-worker samples/s "
            + ", ".join(f"{r:.1f}" for r in rates) + f"; capped {capped} of {of}; "
            f"duty 2nd epoch {duties[1]:.4f}, median later {later[len(later) // 2]:.4f}")


@test
def cpu_bound_counts_steady_with_more_workers_than_cpus():
    """3 workers on 2 CPUs, the demo as a plain `cargo build --release` makes it (no frame
    pointers): which workers hold a CPU during a window of ~10 ms varies from window to window,
    and a CPU-bound kind's in-window count over the duty spread by +-25% an epoch. Over the
    share of the workers' CPU time the windows saw (worker_cpu_ms, counted per thread while it
    runs a worker) it spreads far less, block_in_place's handoffs included (the mix demo has
    one). Every kind is counted within 10% of the truth and every worker gets its budget within
    10%. Tokio's raw::poll begins with a jmp in such a build, which the kernel emulates: priced
    as a single step, the tool's estimate of its cost passed the 1% budget and the budget
    bounded the windows (bench/RESULTS.md, "Plain release builds")."""
    samples, meta, truth = profile([], 20, workers=3, binary=DEMO_NOFP)
    good = sorted(clean_epochs(meta) & set(truth))
    known = {e["epoch"] for e in meta["overhead"]["epochs"] if e.get("worker_cpu_ms")}
    assert len(good) >= 6, f"only {len(good)} clean epochs"
    assert len(known & set(good)) >= len(good) - 1, \
        f"workers' CPU known for {sorted(known)}, clean epochs {good}"
    per = []
    for e in good:
        est = sum(c["sum"] for c in meta["count_terms"]
                  if c["epoch"] == e and "cpu_kind" in (c["future"] or ""))
        per.append(est / truth[e]["resumes"]["cpu"])
    mean = sum(per) / len(per)
    sd = (sum((x - mean) ** 2 for x in per) / (len(per) - 1)) ** 0.5
    total = sum(c["sum"] for c in meta["count_terms"] if c["epoch"] in good and
                "cpu_kind" in (c["future"] or "")) / sum(truth[e]["resumes"]["cpu"] for e in good)
    # Over the duty the spread is 0.22-0.30; over the workers' CPU time 0.04-0.12 in runs so
    # far (bench/RESULTS.md).
    check_or_known(sd <= 0.18, f"CPU tasks per epoch {[round(x, 2) for x in per]}: spread "
                   f"{sd:.2f}", meta, 25)
    counted = counted_vs_truth(meta, truth, set(good))
    kinds = {k: counted.get(k, 0) / sum(truth[e]["resumes"][k] for e in good)
             for k in ("cpu", "timer", "channel")}
    cost = meta["overhead"]["est_overhead_pct"]
    # Each worker at its budget (10 a second at the defaults) over the run: the windows find
    # every worker every epoch here, so what one epoch selects short of it is carried into
    # the next (owed_add in sampler.bpf.c).
    rates, capped, of = delivery(meta)
    desc = (f"{len(good)} epochs: CPU tasks counted at {total:.2f} of the truth, per epoch "
            f"{min(per):.2f}-{max(per):.2f} (spread {sd:.2f}); counted "
            + ", ".join(f"{k} {r:.2f}" for k, r in kinds.items()) + "; per-worker samples/s "
            + ", ".join(f"{r:.1f}" for r in rates) + f"; capped {capped} of {of}; "
            f"estimated cost {cost:.2f}%")
    assert len(rates) == 3, desc
    check_or_known(all(0.9 <= r <= 1.1 for r in kinds.values()) and
                   all(9 <= r <= 11 for r in rates) and cost <= 1.0, desc, meta, 25)
    return desc


@test
def counts_at_50_a_second_per_worker():
    """The ground-truth workload of the test above (3 workers on 2 CPUs, a release build)
    at --per-worker-hz 50, built against the newest Tokio release of the matrix
    (mk/tokio-matrix.mk), so that the defaults are checked on a current release too: a window
    draws five times as many stacks, so captures take a larger part of its time and of the
    budget, and each worker's p is three times as high. Every kind counted within 10% of the
    truth, every worker within 10% of 50 a second, at most 2% of worker-epochs capped."""
    newest = tm.releases()[-1]
    binary = os.path.join(os.path.dirname(DEMO_NOFP), f"demo-tokio-{newest}")
    assert os.path.exists(binary), f"{binary} missing: run make tokio-matrix"
    samples, meta, truth = profile([], 20, "--per-worker-hz", 50, workers=3, binary=binary)
    good = sorted(clean_epochs(meta) & set(truth))
    assert len(good) >= 6, f"only {len(good)} clean epochs"
    counted = counted_vs_truth(meta, truth, set(good))
    kinds = {k: counted.get(k, 0) / sum(truth[e]["resumes"][k] for e in good)
             for k in ("cpu", "timer", "channel")}
    rates, capped, of = delivery(meta)
    assert len(rates) == 3, rates
    desc = (f"Tokio {newest}, {len(good)} epochs: counted "
            + ", ".join(f"{k} {r:.2f}" for k, r in kinds.items()) + "; per-worker samples/s "
            + ", ".join(f"{r:.1f}" for r in rates)
            + f"; capped {capped} of {of}; estimated cost "
            f"{meta['overhead']['est_overhead_pct']:.2f}%")
    check_or_known(all(0.9 <= r <= 1.1 for r in kinds.values()) and
                   all(45 <= r <= 55 for r in rates) and capped <= 0.02 * of, desc, meta, 25)
    return desc


@test
def current_thread_counts_at_defaults():
    """A current_thread runtime (tools/flavours) at the defaults: one window of ~6 ms an epoch.
    Its timer tasks fire on Tokio's millisecond grid, which keeps a fixed phase to the kernel's
    tick, and a window's gate opens at one phase of the tick (its attach ends just after one):
    unless each window is a whole number of ticks (whole_ticks in user/probes/arming.c), some
    phases are covered more often than others and a run's timer count is off by up to 20%.
    Each kind's count within 10% of the truth, and the worker at its budget. 30 s: one window
    of one or two ticks an epoch holds a few firings of each timer, and over 20 s the timer
    tasks' count has a standard error of 3-5% (0.89 in one run of about twenty)."""
    d = Demo(binary=tf.FLAVOURS, mode="current")
    try:
        d.wait_seconds(2)
        out = tmpdir("d9est-current-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 30, "--output", out, timeout=90,
                              windows=True)
        assert rc == 0, err[-800:]
        d.wait_seconds(1)
        meta, truth = read_metadata(out), d.seconds()
    finally:
        d.stop()
    assert ("a probe hit costs" in err) == meta["overhead"]["slow_traps"], \
        "the exit summary and metadata disagree on slow traps"
    good = tf.good_epochs(meta, truth)
    assert len(good) >= 20, f"only {len(good)} clean epochs"
    got = {}
    for c in meta["count_terms"]:
        kind = next((k for fn, k in tf.KIND_OF.items() if fn in (c["future"] or "")), None)
        if c["epoch"] in good and kind:
            got[kind] = got.get(kind, 0) + c["sum"]
    ratios = {k: got.get(k, 0) / sum(truth[e]["resumes"][k] for e in good)
              for k in ("cpu", "timer", "channel")}
    rates, capped, of = delivery(meta)
    desc = (f"{len(good)} epochs: counted over truth " +
            ", ".join(f"{k} {r:.2f}" for k, r in ratios.items()) +
            f"; {rates[0]:.1f} samples a second; capped {capped} of {of}")
    check_or_known(all(0.9 <= r <= 1.1 for r in ratios.values()) and 9 <= rates[0] <= 11, desc,
                   meta, 25)
    return desc


@test
def every_worker_sampled_with_32_workers_on_2_cpus():
    """32 busy workers on 2 CPUs (a runtime sized for the host under a container's CPU limit):
    a window of a few ms finds most of them waiting for a CPU. Each worker's p comes from its
    rate per second on the CPU and its CPU time per epoch, so every worker delivers about its
    budget from the first whole epoch, none left behind or run ahead, and the CPU-bound tasks'
    count stays within 10% of the truth."""
    hz = 10
    # Attached wherever in a second the tool's start-up ends, as a user attaches: after an
    # attach late in a second (about one run in four) the first figures of most workers come
    # from schedstat (first_shares in user/probes/arming.c; tools/first-epoch.py aims at it).
    samples, meta, truth = profile(["--cpu-tasks", "64"], 20, workers=32)
    rates, capped, of = delivery(meta)
    # Where the windows the budget pays for cannot deliver (traps of several us), the tool
    # says so at exit: under 80% of hz while the budget set at least half the epochs' duty.
    lo = meta["sampling_started_at_ns"] // 10**9 + 1
    hi = meta["sampling_stopped_at_ns"] // 10**9 - 1
    duties = [e["duty_limit"] for e in meta["overhead"]["epochs"] if lo <= e["epoch"] <= hi]
    bound = 2 * duties.count("budget") >= len(duties) > 0
    said = "samples a second of the" in profile.stderr
    mean_rate = sum(rates) / len(rates)
    assert said == (mean_rate < 0.8 * hz and bound), \
        (f"delivery note {'' if said else 'not '}printed at {mean_rate:.1f} a worker-second, "
         f"{duties.count('budget')} of {len(duties)} epochs' duty set by the budget")
    sampled = [w for w in meta["workers"] if w["samples_written"]]
    # The workers' CPU time per second comes from what is left of the attach's epoch: with
    # less than 0.1 s of it left, the first whole epoch still calibrates.
    first = meta["sampling_started_at_ns"] // 10**9 + 1
    if meta["sampling_started_at_ns"] % 10**9 > 9 * 10**8:
        first += 1
    per_epoch = {}
    for w in meta["workers"]:
        for e in w["epochs"]:
            if e["complete"]:
                per_epoch[e["epoch"]] = per_epoch.get(e["epoch"], 0) + e["selected"] / 32
    later = [per_epoch.get(e, 0) for e in range(first + 1, meta["sampling_stopped_at_ns"] //
                                                 10**9)]
    good = clean_epochs(meta) & set(truth)
    counted, se = counted_vs_truth(meta, truth, good), counted_se(meta, good)
    real = {k: sum(truth[e]["resumes"][k] for e in good) for k in ("cpu", "timer", "channel")}
    cpu = counted.get("cpu", 0) / real["cpu"]
    # The timer and channel tasks are reported with their 95% intervals, not held to 10%: over
    # 32 workers their resumes come in bursts longer than a window, so a 20 s run's count
    # spreads by about 10% and its interval is some 20% wide (bench/RESULTS.md, "Task kinds
    # with 32 workers on 2 CPUs").
    others = ", ".join(f"{k} {counted.get(k, 0) / real[k]:.2f} +- "
                       f"{1.96 * se.get(k, 0) / real[k]:.2f}" for k in ("timer", "channel")
                       if real[k])
    short = meta["overhead"]["windows_short_of_wait"]
    assert ("the workers wait for a CPU" in profile.stderr) == short["noted"], short
    desc = (f"attach {meta['sampling_started_at_ns'] % 10**9 / 1e6:.0f} ms into its second; "
            f"windows short of the run queues' wait in {short['epochs']} of {short['of']} "
            f"epochs; "
            f"{len(sampled)} of 32 workers sampled; first whole epoch "
            f"{per_epoch.get(first, 0):.1f} a worker, then {min(later):.1f}-{max(later):.1f}; "
            f"over the run {mean_rate:.1f} a worker-second (each {min(rates):.1f}-"
            f"{max(rates):.1f}); capped {capped} of {of}; counted over the truth: CPU tasks "
            f"{cpu:.2f}, {others}")
    # No ramp: the first whole epoch delivers at least half of hz. Per worker: each waits
    # ~60 ms on a run queue between slices of a tick, and windows as long as that wait find
    # every busy worker in most epochs (runq_gap in user/probes/arming.c); the epochs that miss
    # one are owed and repaid a quarter at a time (owed_add in bpf/sampler.bpf.c). So over 20 s
    # each worker stays within 10-20% of hz (bench/RESULTS.md, "Windows as long as the run
    # queues' wait"): left behind (under 0.75 hz), or run ahead (over 1.25 hz), means well
    # outside that.
    # Where the budget's windows fall short of that wait in a third of the epochs or more the
    # tool says so at exit, and a worker's rate follows how many epochs found it (a known gap
    # of issue 25).
    assert len(sampled) == 32 and 0.9 <= cpu <= 1.1, desc
    check_or_known(capped <= 0.02 * of and per_epoch.get(first, 0) >= 0.5 * hz and
                   0.9 * hz <= mean_rate <= 1.1 * hz and min(rates) >= 0.75 * hz and
                   max(rates) <= 1.25 * hz, desc, meta, 25)
    return desc


@test
def intervals_cover_the_truth():
    """The report's 95% intervals (windows as the drawn units, Student's t), of the samples'
    estimates and of the task types' counts: over 8 disjoint 4 s spans of one run, the demo's
    count of each kind lies inside in most of them. A right interval misses 1 in 20, and 3 or
    more misses of 8 then happen about once in 170 tries. The counts' intervals of the channel
    tasks, which run on a timer and are counted alike in every window, rest on the counts' edge
    terms (edge_sq) and on the wake-chain correction's own error (price_se); they held the
    truth in 15-20 of 20 spans of a run (bench/RESULTS.md, "The wake-chain correction's own
    error"), so the counts' intervals may miss one more. The variance terms in metadata
    (estimate_terms) add up to the samples' weights."""
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
    inside = {k: sum(1 for r in rows if abs(r[k][0] - r[k][2]) <= r[k][1])
              for k in [k + c for k in coverage_tool.KINDS for c in ("", " counted")]}
    res = [f"{k} {n} of {len(rows)}" for k, n in inside.items()]
    assert all(n >= len(rows) - (4 if k.endswith("counted") else 3) for k, n in inside.items()), \
        "; ".join(res)
    return "truth inside: " + "; ".join(res)


if __name__ == "__main__":
    run_all()
