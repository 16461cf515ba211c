#!/usr/bin/env python3
"""Overhead issue: armed windows bound what the probes cost a busy target."""
import subprocess
import time

from harness import (ALWAYS_ARMED, TOOL, Demo, read_metadata, read_samples, run_all, run_tool,
                     test, tmpdir)

_runs = {}


def cost_while_profiling(d, budget=None, hz=None, secs=7):
    out = tmpdir(f"d9ovh{budget}-")
    extra = ["--overhead-budget", str(budget)] if budget else []
    extra += ["--per-worker-hz", str(hz)] if hz else []
    # The probes' and windows' cost alone: on-CPU samples and long polls' clock ticks are
    # fixed costs of their own, measured apart (bench/RESULTS.md, "The defaults"), that the
    # windows cannot shrink.
    extra += ["--cpu-hz", "0", "--long-poll-ms", "0"]
    p = subprocess.Popen([TOOL, "--pid", str(d.pid), "--output", out, "--quiet", *extra,
                          "--duration", str(secs), "--format", "jsonl"], stderr=subprocess.PIPE,
                         text=True)
    time.sleep(2)  # attached and past the first, calibrating windows
    during = d.cpu_ns_per_poll(3)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, f"tool exit {p.returncode}: {err}"
    return during, read_metadata(out), out


def hot_runs():
    """The hot demo's CPU per poll unprobed, always armed and at the defaults, once."""
    if not _runs:
        d = Demo(workers=2, mode="hot")
        try:
            d.wait_seconds(1)
            _runs["before"] = d.cpu_ns_per_poll(3)
            _runs["always"], _runs["ameta"], _runs["aout"] = cost_while_profiling(d, 100)
            # The defaults: a 1% budget. 9 s: the hit's cost measured in the target needs two
            # lean windows, which go in the first three epochs and every fourth after, each
            # where the epoch's sampling windows leave room for it.
            _runs["windowed"], _runs["meta"], _ = cost_while_profiling(d, secs=9)
            # Windows that sample about 1 in 2 of their transitions: captures in plenty.
            _, _runs["meta99"], _ = cost_while_profiling(d, hz=99)
        finally:
            d.stop()
    return _runs


@test
def windows_bound_probe_cost():
    r = hot_runs()
    before, always, ameta, windowed, meta = (r["before"], r["always"], r["ameta"], r["windowed"],
                                             r["meta"])
    ovh = meta["overhead"]
    # Probing every poll must be visible, or the comparison proves nothing.
    assert always >= 1.3 * before, f"always armed: {always:.0f} vs {before:.0f} ns per poll"
    # The 1% figure itself is a benchmark (bench/RESULTS.md: ratios side by side); here, on a
    # shared CI machine, the default must cost a small fraction of what probing every poll
    # does, and the tool's own estimate must stay near its budget.
    assert windowed - before <= 0.25 * (always - before), \
        f"windowed: {windowed:.0f} ns per poll vs {before:.0f} unprobed, {always:.0f} always"
    assert ovh["mode"] == "armed_windows" and ovh["armed_fraction"] < 0.05, ovh
    assert ovh["est_overhead_pct"] <= 3, ovh
    samples = meta["samples"]["written"]
    # Delivered per worker per complete, calibrated epoch, against the default 10/s.
    sel = [e["selected"] for w in meta["workers"] for e in w["epochs"]
           if e["complete"] and not e["calibrating"]]
    assert sel and sum(sel) / len(sel) >= 6, f"delivered per worker-epoch: {sel}"
    # The hit's cost as the lean windows measured it inside the target, against what probing
    # every poll cost per hit in this very demo (CPU per poll over hits per poll).
    cnt = ameta["counters"]
    per_hit = (always - before) / (cnt["probe_hits"] / cnt["polls"])
    cost = ovh["probe_hit_cost_ns"]
    got, se = cost["in_target_measured"], cost["in_target_se"]
    if got is None:
        # At 10 Hz the hot demo's windows are ~1 ms, so two lean windows can hold fewer
        # polls than a measurement needs; that, and only that, may leave it unmeasured.
        assert cost["in_target"] is None and (
            cost["lean_windows"] < 2 or min(cost["lean_polls"], cost["sampling_polls"]) < 500
        ), cost
        return (f"hit cost not measured in the target: {cost['lean_windows']} lean windows, "
                f"{cost['lean_polls']:.0f} lean and {cost['sampling_polls']:.0f} sampling "
                f"polls; {per_hit:.0f} ns always armed, {cost['per_hit']:.0f} ns in use")
    # Within 30% and the measurement's own error: the two figures come from runs a few
    # seconds apart, and a VM's trap cost drifts by 20-30% between minutes.
    assert abs(got - per_hit) <= 0.30 * per_hit + 2 * se, \
        f"hit cost in target {got:.0f} +- {se:.0f} ns, always armed {per_hit:.0f} ns per hit"
    # Used in place of the calibration only once it is precise.
    if cost["in_target"] is not None:
        assert cost["in_target"] == got and se <= 0.2 * got, cost
    return (f"hit: {got:.0f} +- {se:.0f} ns measured in windows "
            f"({'used' if cost['in_target'] else 'not used'}), {per_hit:.0f} ns always "
            f"armed, {cost['emulated'] + cost['program_run']:.0f} ns calibrated; "
            f"CPU per poll: unprobed {before:.0f} ns, always armed {always:.0f} ns, "
            f"1% budget {windowed:.0f} ns ({windowed / before:.3f}); armed "
            f"{100 * ovh['armed_fraction']:.2f}% of the time, est. overhead "
            f"{ovh['est_overhead_pct']:.2f}%, {samples} samples, "
            f"{sum(sel) / len(sel):.1f} per worker-epoch (10 requested)")


@test
def captures_kept_out_of_hit_cost():
    """At 99 samples per worker-second a window captures a stack for about one transition in
    two (~9 us each, the program measures them). Counted in the busy time they would price
    each hit about a third high, and hits x that cost would overstate the budget's spend and
    the in-window correction. So their time is left out, and so are the polls near them."""
    r = hot_runs()
    cnt = r["ameta"]["counters"]
    per_hit = (r["always"] - r["before"]) / (cnt["probe_hits"] / cnt["polls"])
    meta = r["meta99"]
    cost = meta["overhead"]["probe_hit_cost_ns"]
    written = meta["samples"]["written"]
    captured_us = meta["counters"]["capture_ns"] / 1e3 / max(written, 1)
    assert written >= 300, f"only {written} samples at 99 Hz"
    # The cost in use: measured in the windows, or (too few polls away from captures in a
    # short run) the calibration's.
    # The program's own time per hit, captures left out, depends little on the rate; with
    # them counted in it, 99 Hz would read about five times 10 Hz. Unlike the trap's cost,
    # which drifts by 20-30% between minutes on a VM, it is a steady figure to compare. At
    # 10 Hz the hot demo's windows are ~1 ms (the 0.05% duty floor), so the settle's and
    # removal's hits, which take the program's short path, are a larger share than at 99 Hz,
    # hence the ratio's slack.
    run10 = r["meta"]["overhead"]["probe_hit_cost_ns"]["program_run"]
    assert cost["program_run"] <= 2.5 * run10, \
        f"program per hit {cost['program_run']:.0f} ns at 99 Hz, {run10:.0f} ns at 10 Hz"
    # And the hit's price in use stays near what probing every poll cost (a loose bound: the
    # two are measured in different runs, minutes apart, and the trap's cost drifts between
    # them; the captures are the program_run check's).
    assert 0.5 * per_hit <= cost["per_hit"] <= 2 * per_hit, \
        f"hit priced at {cost['per_hit']:.0f} ns at 99 Hz, always armed {per_hit:.0f} ns per hit"
    assert 0 < captured_us < 100, f"{captured_us:.1f} us of capture per sample"
    src = "measured in windows" if cost["in_target"] is not None else "calibrated"
    return (f"at 99 Hz: program {cost['program_run']:.0f} ns per hit ({run10:.0f} at 10 Hz); "
            f"hit {cost['per_hit']:.0f} ns ({src}), {per_hit:.0f} ns always armed; {written} "
            f"samples, {captured_us:.1f} us of capture each")


@test
def yield_probed_on_its_pending_path():
    r = hot_runs()
    ameta = r["ameta"]
    yields = [p for p in ameta["probes"]["symbols"] if "YieldNow" in p["name"]]
    assert yields and all(p.get("pending_path_only") for p in yields), yields
    # A hot demo task yields in every poll: raw::poll and one park-point hit. A probe on
    # YieldNow::poll's entry would also be hit by its Ready return on the resume (3.25 a poll).
    cnt = ameta["counters"]
    per_poll = cnt["probe_hits"] / cnt["polls"]
    assert per_poll < 2.6, f"{per_poll:.2f} hits per poll always armed"
    # Stacks taken in the callee start at its call site: YieldNow::poll is the innermost
    # function (what it inlined there, with_defer, may sit above it when inlines are
    # expanded), then the demo's async fn that awaited it.
    at_yield = [s for s in read_samples(r["aout"]) if s["park_point"] == "yield"]
    assert len(at_yield) >= 10, f"only {len(at_yield)} samples parked at a yield"
    for s in at_yield:
        names = [f["name"] or "" for f in s["stack"] if not f.get("inlined")]
        assert "YieldNow" in names[0] and any("cpu_kind_task" in n for n in names[1:4]), names[:4]
    return (f"{per_poll:.2f} hits per poll always armed; {len(at_yield)} yield stacks topped "
            f"by YieldNow::poll")


@test
def windows_sized_by_samples_at_99hz():
    """At 99 Hz the windows need see only 2 eligible transitions per sample (16 up to 10 Hz).
    With 16 the duty they would ask for is more than the 1% budget pays on the hot demo, so
    every epoch's duty would be the budget's and the tool would spend its whole budget; with
    2, the samples set the duty in some epochs, for as many samples."""
    meta = hot_runs()["meta99"]
    epochs = meta["overhead"]["epochs"][2:]  # past the first windows, sized before any count
    by_samples = [e for e in epochs if e["duty_limit"] == "samples"]
    # What the windows deliver when the samples size them (epochs the budget bound, during the
    # duty's ramp from its floor, deliver less by design).
    sized = {e["epoch"] for e in by_samples}
    whole = [e for w in meta["workers"] for e in w["epochs"]
             if e["complete"] and not e["calibrating"] and not e["capped"]
             and e["epoch"] in sized]
    if len(whole) < 2:
        # Where a hit costs several us (traps of ~6 us on some machines, ~0.6 us on others),
        # the budget cannot pay for 99 samples per worker-second: then the windows must keep
        # to the budget, which is all that can be asked. The samples may still size an epoch
        # now and then, where the budget's duty came out high; too few to judge them by.
        # The epochs' own estimates, past the first two and short of the last (cut by the
        # run's end): the run's whole figure also holds the first windows, which put in every
        # probe while the tool's caches warm up and which the plan leaves unpaid by design
        # (docs/design.md, "Planning the duty"); on a 7 s run that start is a large share. The
        # median: the warm-up's last spike (the tool's first symbols) can fall in the third
        # epoch, and of five epochs it would decide the mean.
        steady = sorted(e["est_overhead_pct"] for e in epochs[:-1])
        est = steady[len(steady) // 2]
        whole_pct = meta["overhead"]["est_overhead_pct"]
        hit = meta["overhead"]["probe_hit_cost_ns"]["per_hit"]
        assert hit > 3000, f"{len(by_samples)} epochs' duty set by the samples, " \
            f"{len(whole)} of them whole and uncapped, with {hit} ns hits: " \
            f"{[e['duty'] for e in epochs]}"
        assert est <= 1.25, f"budget-bound windows cost {est:.2f}% a median epoch (budget 1%): " \
            f"{[e['est_overhead_pct'] for e in epochs]}"
        return (f"budget-bound at 99 Hz with {hit} ns hits ({len(by_samples)} epochs sized by "
                f"the samples): estimated cost {est:.2f}% a median epoch past the first two, "
                f"{whole_pct:.2f}% over the run")
    sel = sum(e["selected"] for e in whole) / len(whole)
    elig = sum(e["eligible"] for e in whole) / len(whole)
    # The mean without the lowest worker-epoch: one whose window caught a worker descheduled
    # (38 transitions instead of ~180) should not decide it. Not the median: of ~12
    # worker-epochs it swings with how the two workers split the windows' CPU (77 in one
    # run whose mean was 93, 97-101 in most).
    got = sorted(e["selected"] for e in whole)
    med = got[len(got) // 2]
    trimmed = sum(got[1:]) / (len(got) - 1)
    assert trimmed >= 0.85 * 99, \
        f"{trimmed:.1f} samples per worker-epoch at 99 Hz without the lowest: {got}"
    # Windows are sized for 2 transitions per sample from the last epoch's in-window rate,
    # which captures (~9 us each, one every other transition) slow: p comes out at 0.5-0.7,
    # not near 1.
    assert elig >= 1.3 * sel, f"{elig:.0f} eligible transitions for {sel:.0f} samples"
    est = meta["overhead"]["est_overhead_pct"]
    return (f"{len(by_samples)} of {len(epochs)} epochs sized by the samples; {sel:.1f} samples "
            f"(median {med}) of {elig:.0f} eligible per worker-epoch; estimated cost {est:.2f}%")


@test
def hits_outside_the_gate_counted_by_phase():
    """Each hit of a window's probes is counted by where the window was: in the gate, while its
    links go in, while it settles before the gate, while its links come out (the program reads
    the phase the arming thread writes). Only hits on kept probes between windows are in none,
    and the three outside the gate come with every window."""
    meta = hot_runs()["meta"]
    c, windows = meta["counters"], meta["overhead"]["windows"]
    phases = {k: c[f"probe_hits_{k}"] for k in ("in_gate", "attaching", "settling", "detaching")}
    rest = c["probe_hits"] - sum(phases.values())
    assert windows >= 4, f"only {windows} windows"
    assert all(phases.values()), f"a phase with no hit in {windows} windows: {phases}"
    assert 0 <= rest <= max(meta["overhead"]["kept_hits"], 0.02 * c["probe_hits"]), \
        f"{rest} hits in no phase, {meta['overhead']['kept_hits']} on kept probes: {phases}"
    return (f"per window: " + ", ".join(f"{k} {v / windows:.0f}" for k, v in phases.items())
            + f"; {rest} on kept probes")


@test
def cap_binds_only_at_the_burst_in_windows():
    """The cap's bucket is refilled whole at each epoch: in windows an epoch's ~hz selections
    all come in a few ms, and refilled at hz with time (or by hz per epoch) it would sit
    near empty, and 10-30% of worker-epochs at the defaults would be capped with fewer
    selections than the burst: epochs lost to unbiased estimates. So a worker-epoch is capped
    only when it wanted more than the burst."""
    r = hot_runs()
    checked, capped = 0, []
    for meta in (r["meta"], r["meta99"]):
        burst = meta["sampler"]["cap"]["burst"]
        for w in meta["workers"]:
            for e in w["epochs"]:
                if e["calibrating"]:
                    continue
                checked += 1
                assert e["selected"] <= burst, f"worker {w['worker']} epoch {e}: over the burst"
                if e["capped"]:
                    capped.append((e["selected"], burst))
                    assert e["selected"] == burst, \
                        f"worker {w['worker']} epoch {e['epoch']}: capped at {e['selected']} " \
                        f"of a burst of {burst}"
    assert checked >= 10, f"only {checked} worker-epochs"
    return f"{len(capped)} of {checked} worker-epochs capped, each at its burst"


@test
def cold_probes_kept_until_hit():
    """Probes not hit in recent windows stay in place between windows (the kept link), so a
    window puts in and takes out only the hot ones. A kept probe that starts being hit costs
    its hits outside windows too: past a small share of the budget it must leave the kept link
    within a check, and its polls must then be sampled in windows like any other. The demo's
    late tasks are of their own future type: their raw::poll is never hit until they start,
    6 s in, at ~100k polls/s."""
    d = Demo("--late-cpu-tasks", "32", "--late-after", "6", workers=2, mode="hot")
    try:
        out = tmpdir("d9kept-")
        p = subprocess.run([TOOL, "--pid", str(d.pid), "--output", out, "--quiet",
                            "--duration", "12", "--format", "jsonl"], stderr=subprocess.PIPE,
                           text=True, timeout=90)
        assert p.returncode == 0, f"tool exit {p.returncode}: {p.stderr}"
        late_rate = d.polls_per_sec(sorted(d.seconds())[-4:])
    finally:
        d.stop()
    meta = read_metadata(out)
    ovh = meta["overhead"]
    assert ovh["kept_rebuilds"] >= 2 and ovh["kept_evictions"] >= 1, \
        f"kept link built {ovh['kept_rebuilds']} times, {ovh['kept_evictions']} evictions"
    assert ovh["kept_probes"] > 0, ovh
    # What kept probes may take (2% of the budget), plus the late probe's hits for 0.2 s: the
    # checks come every 50 ms between windows. Never evicted, it would take ~6 s of them.
    allowance = 0.02 * ovh["budget_pct"] / 100 * ovh["target_cpu_s"] * 1e9 \
        / ovh["probe_hit_cost_ns"]["per_hit"]
    bound = allowance + 0.2 * late_rate
    assert ovh["kept_hits"] <= bound, \
        f"{ovh['kept_hits']} hits on kept probes, bound {bound:.0f} ({late_rate:.0f} polls/s)"
    late = [s for s in read_samples(out)
            if any("late_cpu_task" in (f.get("name") or "") for f in s["stack"])]
    assert len(late) >= 10, f"only {len(late)} samples of the late tasks"
    return (f"{ovh['kept_probes']} probes kept, {ovh['kept_evictions']} evicted, "
            f"{ovh['kept_rebuilds']} kept links; {ovh['kept_hits']} hits on kept probes "
            f"(bound {bound:.0f}); {len(late)} samples of the late tasks; "
            f"est. overhead {ovh['est_overhead_pct']:.2f}%")


@test
def stale_epoch_capped_alone():
    """A worker whose work jumps (the demo's late CPU tasks start 3 s in) selects with the
    last epoch's p, set for its quiet second, and that epoch is capped at the burst; so is
    the next when the jump came late in the second, its count then a fraction of the new
    rate. The bucket is refilled whole at each epoch, so the cap ends with the stale p:
    refilled at hz with time, it would stay near empty while p, now set right, selects ~hz
    a second, and cap about every other epoch after the jump (..CCC.... per worker with that
    build). The demo starts a quarter into a second (epochs are CLOCK_MONOTONIC seconds), so
    that the jump comes early in one: a jump late in a second can leave that epoch and the
    next both just under the cap."""
    time.sleep((1.25 - time.monotonic() % 1.0) % 1.0)
    d = Demo("--cpu-tasks", "0", "--channel-tasks", "0", "--timer-tasks", "4",
             "--late-cpu-tasks", "8", "--late-after", "3", workers=2, mode="mix")
    try:
        out = tmpdir("d9stale-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 10, "--output", out,
                              "--per-worker-hz", 400, "--format", "jsonl", *ALWAYS_ARMED,
                              timeout=70)
        assert rc == 0, err[-800:]
    finally:
        d.stop()
    meta = read_metadata(out)
    burst = meta["sampler"]["cap"]["burst"]
    first = meta["sampling_started_at_ns"] // 10**9 + 1
    last = meta["sampling_stopped_at_ns"] // 10**9 - 1
    runs = []
    for w in meta["workers"]:
        eps = sorted((e for e in w["epochs"] if first <= e["epoch"] <= last),
                     key=lambda e: e["epoch"])
        flags = "".join("C" if e["capped"] else "." for e in eps)
        runs.append(flags)
        for e in eps:
            assert not e["capped"] or e["selected"] >= burst, \
                f"worker {w['worker']} capped at {e['selected']} of a {burst} burst: {flags}"
    jumped = sum(1 for r in runs if "C" in r)
    after = sum(r[r.index("C") + 2:].count("C") for r in runs if "C" in r)
    assert jumped >= 1, f"no worker capped at the jump: {runs}"
    assert after == 0, f"{after} worker-epochs capped after the jump's two: {runs}"
    return f"capped epochs per worker (C): {runs}; burst {burst}"


if __name__ == "__main__":
    raise SystemExit(run_all())
