#!/usr/bin/env python3
"""Long polls (--long-poll-ms): long_polls.jsonl against the demo's ground truth.

With --long-poll-tasks the demo's spinning task holds its worker ~20 ms on the CPU every
~250 ms, the sleeping one ~15 ms off the CPU (std::thread::sleep) every ~400 ms; each writes a
"long_poll" line per poll with its thread and CLOCK_MONOTONIC start and end.
"""
import json
import os
import statistics
import subprocess
import tempfile
import time

from harness import (DEMO_FP, ROOT, TOOL, Demo, frame_names, read_metadata, run_all, run_tool,
                     test)

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
        out = tempfile.mkdtemp(prefix="d9out-lp-")
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


def prog_runs(names):
    """{program name: run count} of the loaded BPF programs so named (bpftool; the tests run
    one tool at a time)."""
    progs = json.loads(subprocess.run(["bpftool", "prog", "show", "-j"], check=True,
                                      capture_output=True, text=True).stdout)
    runs = {}
    for p in progs:
        if p.get("name") in names:
            runs[p["name"]] = runs.get(p["name"], 0) + p.get("run_cnt", 0)
    return runs


@test
def ticks_follow_the_target():
    """The clock events of the long polls and the on-CPU samples follow the target's threads:
    an idle target costs no ticks (one per CPU would run 1000 a second each, on every CPU,
    for every profiled process of a fleet), and threads it makes later are ticked too."""
    d = Demo("--cpu-tasks", "0", "--channel-tasks", "0", "--timer-tasks", "0",
             "--blocking-tasks", "0", workers=2, mode="mix")
    out = tempfile.mkdtemp(prefix="d9ticks-")
    try:
        p = subprocess.Popen([TOOL, "--pid", str(d.pid), "--duration", "6", "--output", out,
                              "--quiet", "--cpu-hz", "19"], stderr=subprocess.PIPE, text=True)
        names = ("lp_tick", "cpu_tick")
        time.sleep(2.5)
        r0, t0 = prog_runs(names), time.time()
        time.sleep(3)
        r1, t1 = prog_runs(names), time.time()
        err = p.communicate(timeout=60)[1]
        assert p.returncode == 0, f"tool exit {p.returncode}: {err[-800:]}"
    finally:
        d.stop()
    assert set(r1) == set(names), f"programs seen: {r1}"
    rates = {k: (r1[k] - r0[k]) / (t1 - t0) for k in names}
    meta = read_metadata(out)
    assert meta["long_polls"]["ticks_follow"] == "threads", meta["long_polls"]
    assert meta["cpu_samples"]["events_follow"] == "threads", meta["cpu_samples"]
    assert rates["lp_tick"] < 50, f"an idle target ticked: {rates}"
    return (f"idle target: lp_tick {rates['lp_tick']:.1f}/s, cpu_tick {rates['cpu_tick']:.1f}/s"
            f" ({meta['cpu_samples']['clock_events']} per-thread events)")


@test
def parked_workers_are_not_long_polls():
    """A thread that took a worker over from block_in_place before the attach runs the worker
    loop inside that blocking task's poll, so the task's id stays current while it parks: on
    the mix demo with 32 workers on 2 CPUs dozens of such parks a second passed for blocked
    polls. The first one the loader sees tells the sampler to skip the thread's parks."""
    d = Demo(workers=32, mode="mix")
    out = tempfile.mkdtemp(prefix="d9nested-")
    try:
        d.wait_seconds(2)
        rc, _, err = run_tool("--pid", d.pid, "--duration", 8, "--output", out, timeout=70,
                              windows=True)
        assert rc == 0, err[-800:]
    finally:
        d.stop()
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
