#!/usr/bin/env python3
"""Long polls (--long-poll-ms): long_polls.jsonl against the demo's ground truth.

With --long-poll-tasks the demo's spinning task holds its worker ~20 ms on the CPU every
~250 ms, the sleeping one ~15 ms off the CPU (std::thread::sleep) every ~400 ms; each writes a
"long_poll" line per poll with its thread and CLOCK_MONOTONIC start and end.
"""
import gzip
import json
import os
import statistics
import subprocess
import time

from harness import (DEMO_FP, ROOT, TOOL, Demo, frame_names, profile_demo, read_metadata,
                     run_all, run_tool, test, tmpdir)

TRUTH = {"spin": (20e6, 250e6), "sleep": (15e6, 400e6)}


def truth_lines(demo, kind):
    return [l for l in demo.lines("long_poll") if l["kind"] == kind]


@test
def demo_long_poll_truth():
    """Each kind's polls last what they should, at the rate they should, on worker threads;
    without the flag the demo writes none (other tests see the same demo)."""
    plain = Demo(workers=2, mode="mix")
    d = Demo("--long-poll-tasks", "1", workers=2, mode="mix")
    try:
        time.sleep(4)
        out = []
        for kind, (dur, period) in TRUTH.items():
            lines = truth_lines(d, kind)
            durs = [l["end_ns"] - l["start_ns"] for l in lines]
            assert len(lines) >= 0.7 * 4e9 / (period + dur), f"{kind}: only {len(lines)} polls"
            med = statistics.median(durs)
            # Wall time: a shared machine may stretch a spin, never shorten it.
            assert dur <= med <= 2 * dur, f"{kind}: median {med / 1e6:.1f} ms"
            assert all(l["tid"] != d.pid for l in lines), f"{kind}: a poll on the main thread"
            out.append(f"{kind} {len(lines)} polls, median {med / 1e6:.1f} ms")
        assert not plain.lines("long_poll"), "the demo wrote long polls without the flag"
        return "; ".join(out)
    finally:
        d.stop()
        plain.stop()


def matches(found, truth):
    """The truth line (same thread, overlapping in time) a reported long poll belongs to; a
    clock tick's run may start a tick before the poll's own clock read."""
    slack = 2e6 if found["found_by"] == "clock_ticks" else 0
    for t in truth:
        if t["tid"] == found["tid"] and \
                t["start_ns"] - slack <= found["timestamp_ns"] <= t["end_ns"]:
            return t
    return None


def check_blocked(binary, fp=True):
    """At the defaults, 90% of the sleeping long polls of the sampled span are in
    long_polls.jsonl (the id word is learned in the first window), with their duration, on
    their worker, with the sleeping function on their stack, and little else is. Likewise the
    spinning ones, found by clock ticks (their stacks walked by frame pointers where the
    target keeps them, fp, and in BPF from .eh_frame where it does not)."""
    d = Demo("--long-poll-tasks", "1", binary=binary, workers=2, mode="mix")
    try:
        time.sleep(2)
        out = tmpdir("d9out-lp-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 10, "--output", out,
                              timeout=90, windows=True)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        time.sleep(0.5)
        truth = d.lines("long_poll")
    finally:
        d.stop()
    meta = read_metadata(out)
    lp = meta["long_polls"]
    assert lp["status"] == "learned", lp
    with open(os.path.join(out, "long_polls.jsonl")) as f:
        found = [json.loads(l) for l in f if l.strip()]
    t0, t1 = meta["sampling_started_at_ns"], meta["sampling_stopped_at_ns"]
    learned = lp["learned_at_ns"]
    sleeps = [t for t in truth if t["kind"] == "sleep" and t0 <= t["start_ns"] and
              t["end_ns"] <= t1]
    # Over the whole sampled span: the id word is learned in the run's first window, and the
    # polls before it count as missed.
    after = sleeps
    hit = {id(matches(f, truth)): f for f in found if matches(f, truth)}
    got = [t for t in after if id(t) in hit]
    assert len(after) >= 10, f"only {len(after)} sleeping polls in the run"
    assert len(got) >= 0.9 * len(after), f"found {len(got)}/{len(after)} sleeping polls"
    err_ = statistics.median(hit[id(t)]["duration_ns"] / (t["end_ns"] - t["start_ns"]) - 1
                             for t in got)
    assert abs(err_) <= 0.2, f"median duration error {err_:+.1%}"
    on_stack = sum(1 for t in got if "dial9_demo::long_sleep_work" in frame_names(hit[id(t)]))
    assert on_stack >= 0.9 * len(got), f"long_sleep_work on {on_stack}/{len(got)} stacks"
    false = [f for f in found if not matches(f, truth)]
    assert len(false) <= 0.05 * max(len(found), 1), \
        f"{len(false)}/{len(found)} long polls match no true one: {false[:2]}"
    spin = check_spins(truth, found, t0, t1, fp) if lp["on_cpu"] == "ticking" else "off"
    p = subprocess.run([TOOL, "report", out], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and f"{len(found)} polls held a worker" in p.stdout, p.stdout[-800:]
    top = p.stdout.split("Longest polls", 1)[1].split("\n\n", 1)[0]
    # The longest name what they did, spinning or sleeping, and with frame pointers the task
    # (without, a tick inside the spin gives its leaf only, and the future goes unnamed).
    did = any(f in top for f in ("long_spin_work", "long_sleep_work", "spin_mix"))
    assert did and "long_poll_task" in top, top[:800]
    return (f"sleep {len(got)}/{len(after)} in the run (word learned after "
            f"{(learned - t0) / 1e6:.0f} ms, word {lp['id_word']}"
            f"{' tagged' if lp['id_tagged'] else ''}), median duration error {err_:+.1%}, "
            f"stack {on_stack}/{len(got)}; spin {spin}; false {len(false)}/{len(found)}")


def check_spins(truth, found, t0, t1, fp):
    """Polls held on the CPU, found by clock ticks. The first tick falls up to a period
    after the poll starts, so it matches from a period before."""
    spins = [t for t in truth if t["kind"] == "spin" and t["start_ns"] >= t0 and
             t["end_ns"] <= t1]
    got = []
    for t in spins:
        f = [f for f in found if f["found_by"] == "clock_ticks" and f["tid"] == t["tid"] and
             t["start_ns"] - 2e6 <= f["timestamp_ns"] <= t["end_ns"]]
        if f:
            got.append((t, f[0]))
    assert len(spins) >= 10, f"only {len(spins)} spinning polls in the run"
    # Ticks land in a poll only while its thread runs: on a loaded machine a poll is seen
    # shorter than its wall time (which counts its preemption), and a few are missed.
    assert len(got) >= 0.85 * len(spins), f"found {len(got)}/{len(spins)} spinning polls"
    err = statistics.median(f["duration_ns"] / (t["end_ns"] - t["start_ns"]) - 1
                            for t, f in got)
    assert -0.35 <= err <= 0.2, f"spin median duration error {err:+.1%}"
    on_stack = sum(1 for _, f in got if "dial9_demo::long_spin_work" in frame_names(f))
    # A tick in the spin's own callee before it set up its frame loses the caller: a few.
    assert on_stack >= 0.8 * len(got), \
        f"long_spin_work on {on_stack}/{len(got)} stacks"
    return (f"{len(got)}/{len(spins)}, median duration error {err:+.1%}, "
            f"stack {on_stack}/{len(got)}")


@test
def long_polls_at_defaults():
    return check_blocked(DEMO_FP)


def matrix_demo(version):
    path = os.path.join(ROOT, "build", f"demo-tokio-{version}")
    assert os.path.exists(path), f"{path} missing: run make tokio-matrix"
    return path


@test
def long_polls_tokio_1_53():
    """Option<NonZeroU64>: one word, no tag (Tokio 1.24.2 at the defaults has the tagged
    Option<Id(u64)> of 1.24-1.42). Matrix builds keep no frame pointers."""
    return check_blocked(matrix_demo("1.53.1"), fp=False)


def wrapper_frames(poll):
    """The demo's Counted<F>::poll frames on a long poll's stack, their own code (not inlined)."""
    return [f["name"] for f in poll["stack"] if not f.get("inlined") and f.get("name") and
            f["name"].startswith("<dial9_demo::Counted<") and "Future>::poll" in f["name"]]


@test
def folded_wrappers_named_after_their_task():
    """The demo's Counted<F>::poll calls its inner future through a pointer, so the compiler
    folds it into one function for several task types (4 and 5 of them), named in the symbol
    table after one. A long poll's stack names it after the poll's own task, as the
    samples do: a frame naming another task's wrapper would put the poll in the wrong task.
    CPU-bound polls of ~15 ms and the channel tasks, whose timer lock is held by preempted
    workers (16 busy ones on 2 CPUs), give long polls of several task types."""
    d = Demo("--cpu-tasks", "32", "--cpu-iters", "400000", workers=16, mode="mix")
    try:
        time.sleep(1)
        out = tmpdir("d9out-lpfold-")
        # A few of the channel and timer tasks' polls a second wait on that lock.
        rc, _, err = run_tool("--pid", d.pid, "--duration", 10, "--output", out,
                              "--long-poll-ms", 2, timeout=60, windows=True)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
    finally:
        d.stop()
    with open(os.path.join(out, "long_polls.jsonl")) as f:
        polls = [json.loads(l) for l in f if l.strip()]
    named = [p for p in polls if p.get("future") and wrapper_frames(p)]
    wrong = [(p["future"], n) for p in named for n in wrapper_frames(p)
             if f"<{p['future']} as" not in n]
    kinds = {p["future"] for p in named}
    assert len(kinds) >= 2, f"long polls of {len(kinds)} task types: {sorted(kinds)}"
    assert not wrong, f"{len(wrong)} wrapper frames of {len(named)} polls name another task: " \
        f"{wrong[:2]}"
    return f"{len(named)} long polls of {len(kinds)} task types, each wrapper named after its own"


def prog_stats(names):
    """{program name: (run count, run time ns)} of the loaded BPF programs so named (bpftool;
    the tests run one tool at a time)."""
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], check=True,
                                      capture_output=True, text=True).stdout)
    stats = {}
    for p in progs:
        if p.get("name") in names:
            n, ns = stats.get(p["name"], (0, 0))
            stats[p["name"]] = (n + p.get("run_cnt", 0), ns + p.get("run_time_ns", 0))
    return stats


def idle_target_ticks(env=None):
    """A 6 s run on an idle demo: its metadata and, over 3 s in the middle, each tick
    program's runs and run time per second."""
    d = Demo("--cpu-tasks", "0", "--channel-tasks", "0", "--timer-tasks", "0",
             "--blocking-tasks", "0", workers=2, mode="mix")
    out = tmpdir("d9ticks-")
    names = ("lp_tick", "lp_sched_tick", "cpu_tick")
    try:
        p = subprocess.Popen([TOOL, "--pid", str(d.pid), "--duration", "6", "--output", out,
                              "--quiet", "--cpu-hz", "19"], stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, **(env or {})))
        time.sleep(2.5)
        s0, t0 = prog_stats(names), time.time()
        time.sleep(3)
        s1, t1 = prog_stats(names), time.time()
        err = p.communicate(timeout=60)[1]
        assert p.returncode == 0, f"tool exit {p.returncode}: {err[-800:]}"
    finally:
        d.stop()
    rates = {k: ((s1[k][0] - s0[k][0]) / (t1 - t0), (s1[k][1] - s0[k][1]) / (t1 - t0))
             for k in s1}
    return read_metadata(out), rates


@test
def ticks_follow_the_target():
    """Where the scheduler tick cannot serve (DIAL9_SCHED_TICK=0 stands in for a kernel without
    an hrtimer tick), the clock events of the long polls and the on-CPU samples follow the
    target's threads: an idle target costs no ticks (one per CPU would run 1000 a second each,
    on every CPU, for every profiled process of a fleet)."""
    meta, rates = idle_target_ticks({"DIAL9_SCHED_TICK": "0"})
    assert meta["long_polls"]["ticks_follow"] == "threads", meta["long_polls"]
    assert meta["long_polls"]["scheduler_tick"] == "disabled", meta["long_polls"]
    assert meta["cpu_samples"]["events_follow"] == "threads", meta["cpu_samples"]
    assert "lp_sched_tick" not in rates, f"the scheduler tick's program was loaded: {rates}"
    assert rates["lp_tick"][0] < 50, f"an idle target ticked: {rates}"
    return (f"idle target: lp_tick {rates['lp_tick'][0]:.1f}/s, cpu_tick "
            f"{rates['cpu_tick'][0]:.1f}/s ({meta['cpu_samples']['clock_events']} per-thread "
            "events)")


def kernel_hz():
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as f:
                for line in f:
                    if line.startswith("CONFIG_HZ="):
                        return int(line.split("=")[1])
        except OSError:
            pass
    return None


@test
def long_polls_ride_the_scheduler_tick():
    """At the defaults the long polls' ticks are the kernel's own scheduler tick (an hrtimer
    every 1 / CONFIG_HZ on each busy CPU), seen at hrtimer_expire_entry: no interrupt of the
    tool's own, so the only cost is the program, which leaves every other hrtimer at once. The
    perf-event program is not even loaded. On an idle target the program costs the machine
    under 0.05% of a CPU."""
    meta, rates = idle_target_ticks()
    lp = meta["long_polls"]
    hz = kernel_hz()
    assert lp["ticks_follow"] == "scheduler_tick", lp
    assert lp["scheduler_tick"] == "used", lp
    if hz:
        assert round(lp["tick_hz"]) == hz, f"tick_hz {lp['tick_hz']} against CONFIG_HZ {hz}"
    assert "lp_tick" not in rates, f"the clock-event program was loaded: {rates}"
    runs, ns = rates["lp_sched_tick"]
    assert ns < 500_000, f"lp_sched_tick cost {ns / 1e3:.0f} us a second on an idle target ({runs:.0f} runs)"
    return (f"CONFIG_HZ {hz}: lp_sched_tick {runs:.0f} runs/s on the machine, "
            f"{ns / 1e3:.1f} us/s ({ns / max(runs, 1):.0f} ns a run) on an idle target")


@test
def parked_workers_are_not_long_polls():
    """A thread that took a worker over from block_in_place before the attach runs the worker
    loop inside that blocking task's poll, so the task's id stays current while it parks: on
    the mix demo with 32 workers on 2 CPUs dozens of such parks a second passed for blocked
    polls. The first one the loader sees tells the sampler to skip the thread's parks."""
    d = Demo(workers=32, mode="mix")
    out = profile_demo(d, 8, "d9nested-")
    meta = read_metadata(out)
    parks = []
    with open(os.path.join(out, "long_polls.jsonl")) as f:
        for line in f:
            names = [fr.get("name") or "" for fr in json.loads(line)["stack"]]
            if any("multi_thread::park::" in n for n in names):
                parks.append(names[:4])
    assert not parks, f"{len(parks)} parked workers written as long polls: {parks[:2]}"
    lp = meta["long_polls"]
    assert lp["nested_worker_loops"] >= 1, lp
    return (f"{lp['nested_worker_loops']} nested worker loops learned, {lp['written']} long "
            f"polls written, {meta['counters']['sleeps_in_polls']} in-poll sleeps' stacks taken")


if __name__ == "__main__":
    run_all()
