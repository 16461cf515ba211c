#!/usr/bin/env python3
"""Tokio releases: the demo built against each release of the matrix (mk/tokio-matrix.mk,
build/demo-tokio-VERSION), profiled by the tool as it is. Per release: discovery finds every
expected probe point and says nothing is missing, workers are found and parked, yields park with
stacks, every task kind is named, and estimates match the demo's own counts per kind."""
import os
import re
import subprocess

from harness import (DEMO_FNS, ROOT, Demo, estimate_vs_truth, frame_names, kind_of,
                     read_metadata, read_samples, remove_tmpdirs, run_all, run_tool, test,
                     tmpdir)

# Worker thread names, as comm truncates them: up to 1.49 and from 1.50.
WORKER_COMMS = ("tokio-runtime-w", "tokio-rt-worker")
# Always armed (every poll probed), as estimation_matches_ground_truth in test_core.py: this
# checks what discovery gives the estimator on each release, not the armed windows.
HZ = 1000
DURATION = 6
BOUND = 0.25
MIN_SAMPLES = 50  # fewer in a kind and the bound means little (blocking: 2 resumes a second)


def releases():
    """The matrix as mk/tokio-matrix.mk lists it: one place to add a release."""
    with open(os.path.join(ROOT, "mk", "tokio-matrix.mk")) as f:
        m = re.search(r"^TOKIO_MATRIX\s*:=\s*(.+)$", f.read(), re.M)
    assert m, "no TOKIO_MATRIX in mk/tokio-matrix.mk"
    return m.group(1).split()


def minor(version):
    return int(version.split(".")[1])


def check_release(version):
    binary = os.path.join(ROOT, "build", f"demo-tokio-{version}")
    assert os.path.exists(binary), f"{binary} missing: run make tokio-matrix"
    # Three blocking tasks (6 resumes a second) instead of one: enough to expect samples. A
    # Notify pair: its waiter parks in Notified, or OwnedNotified from 1.47.
    d = Demo("--blocking-tasks", "3", "--notify-tasks", "1", binary=binary, workers=2,
             mode="mix")
    try:
        d.wait_seconds(2)
        out = tmpdir(f"d9out-tokio-{version}-")
        rc, _, err = run_tool("--pid", d.pid, "--per-worker-hz", HZ, "--duration", DURATION,
                              "--output", out, "--seed", 7, "--overhead-budget", 100, "--format", "jsonl",
                              timeout=DURATION + 60)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        d.wait_seconds(1)
        truth = d.seconds()
    finally:
        d.stop()
    samples, meta = read_samples(out), read_metadata(out)
    res = []

    # Discovery: nothing missing, and the line that would say so is absent.
    disc = meta["discovery"]
    assert not disc["missing"], f"missing: {disc['missing']}"
    assert "Tokio functions not found" not in err, err[-1500:]
    groups = disc["groups"]
    for g in ("task_poll", "task_dealloc", "worker_run", "worker_park", "yield", "sleep",
              "acquire", "atomic_waker"):
        assert groups[g]["probed"] >= 1, f"{g} not probed: {groups}"
    probes = meta["probes"]
    yname = disc["yield_park_point"] or ""
    # One hit per yield: the park point is on a function only the Pending path enters.
    ysyms = [p for p in probes["symbols"] if p["name"] == yname]
    assert ysyms and all(p.get("pending_path_only") for p in ysyms), ysyms
    res.append(f"probes: {probes['poll_functions']} poll, {probes['park_points']} park points, "
               f"worker_park {groups['worker_park']['probed']}, yield at "
               f"{'YieldNow::poll' if 'YieldNow' in yname else yname}")

    # Workers: named as the release names them, found, and seen parking (idle time is
    # counted from the worker-park probe only).
    want_comm = "tokio-rt-worker" if minor(version) >= 50 else "tokio-runtime-w"
    comms = {w["comm"] for w in meta["workers"]}
    assert comms and comms <= set(WORKER_COMMS), f"worker threads {comms}"
    assert want_comm in comms, f"expected {want_comm} threads, got {comms}"
    idle_ms = sum(e["window_idle_ms"] for w in meta["workers"] for e in w["epochs"])
    assert idle_ms > 0, "no worker park seen: no idle time in any epoch"
    res.append(f"workers {len(meta['workers'])} ({meta['worker_detection']}, {want_comm}), "
               f"idle {idle_ms:.0f} ms")
    # Running since before the attach: each found in the release's thread-local context, and
    # no block_in_place after the attach splits one (test_late_attach.py).
    tls = meta["worker_tls"]
    assert tls["status"] == "resolved" and len(meta["workers"]) == 2, \
        f"worker_tls {tls}; workers {[(w['key'], w['detection']) for w in meta['workers']]}"
    res.append(f"TLS context word {tls['context_word']}, worker word {tls['worker_word']}")

    # Stacks: named demo fns, each kind present, yields with their stacks.
    assert len(samples) >= 200, f"only {len(samples)} samples"
    named = sum(1 for s in samples if any(fn in n for n in frame_names(s) for fn in DEMO_FNS))
    assert named >= 0.90 * len(samples), f"{named}/{len(samples)} samples name a demo fn"
    yields = [s for s in samples if s["park_point"] == "yield"]
    yields_cpu = sum(1 for s in yields if kind_of(s) == "cpu")
    assert len(yields) >= 50, f"only {len(yields)} yield parks"
    assert yields_cpu >= 0.90 * len(yields), f"{yields_cpu}/{len(yields)} yields in cpu tasks"
    res.append(f"named {named / len(samples):.1%} of {len(samples)}, "
               f"{len(yields)} yields ({yields_cpu / len(yields):.0%} with cpu_kind_task)")

    # Notify parks: at poll_notified, through OwnedNotified where the demo uses it.
    notified = [frame_names(s) for s in samples
                if any("channel_kind_notified" in n for n in frame_names(s))]
    owned = minor(version) >= 47
    at_notify = sum(1 for names in notified if "poll_notified" in names[0]
                    and any(("OwnedNotified" in n) == owned for n in names
                            if "Notified" in n and "poll_notified" not in n))
    assert len(notified) >= 20, f"only {len(notified)} samples of the Notify waiter"
    assert at_notify >= 0.90 * len(notified), \
        f"{at_notify}/{len(notified)} Notify waits at poll_notified via " \
        f"{'OwnedNotified' if owned else 'Notified'}: {notified[0][:4]}"
    res.append(f"{at_notify}/{len(notified)} waits at {'OwnedNotified' if owned else 'Notified'}")

    # Estimates against the demo's counts; every kind named in stacks, unless so few of its
    # resumes were sampled that none is likely (under e^-6 for an expected 6).
    nepochs, kinds = estimate_vs_truth(samples, meta, truth)
    frac = sum(n for _, _, n in kinds.values()) / max(1, sum(r for _, r, _ in kinds.values()))
    for k, (_, real, n) in kinds.items():
        assert n > 0 or real * frac < 6, f"no sample of kind {k}, {real * frac:.0f} expected"
    est = [f"{k} {got / real if real else 0:.2f} (n={n})" for k, (got, real, n) in kinds.items()]
    checked = []
    for k, (got, real, n) in kinds.items():
        if n < MIN_SAMPLES:
            continue
        checked.append(k)
        assert abs(got - real) <= BOUND * real, f"{k}: est/true out of {BOUND:.0%}: " + \
            "; ".join(est)
    assert {"cpu", "timer", "channel"} <= set(checked), \
        f"too few samples to check: {'; '.join(est)}"
    res.append(f"est/true over {nepochs} epochs (1 in {1 / frac:.1f} resumes sampled): "
               + ", ".join(est))
    return "; ".join(res)


# What a release the tool does not know looks like: the newest release with its worker park and
# the runtime's defer under names no release has used (mangled: length-prefixed components).
RENAMED = {"6worker7Context13park_internal17h": "6worker7Context10park_later17h",
           "5Defer5defer17h": "5Defer7enqueue17h",
           "7runtime7context5defer17h": "7runtime7context7enqueue17h"}


@test
def unknown_release_said_in_one_line():
    """A real binary whose worker park and defer carry unknown names: one line at start names
    both, what they cost and what still works; metadata lists the same; sampling goes on."""
    src = os.path.join(ROOT, "build", f"demo-tokio-{releases()[-1]}")
    assert os.path.exists(src), f"{src} missing: run make tokio-matrix"
    tmp = tmpdir("d9renamed-")
    binary = os.path.join(tmp, "dial9-demo")
    syms = subprocess.run(["nm", src], capture_output=True, text=True, check=True).stdout
    args = []
    for line in syms.splitlines():
        name = line.split()[-1]
        for old, new in RENAMED.items():
            if name.startswith("_ZN5tokio") and old in name:
                args.append(f"--redefine-sym={name}={name.replace(old, new)}")
    assert len(args) == 3, f"expected 3 symbols to rename, found {args}"
    subprocess.run(["objcopy", *args, src, binary], check=True)
    d = Demo(binary=binary, workers=2, mode="mix")
    try:
        d.wait_seconds(1)
        out = tmpdir("d9out-renamed-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 3, "--output", out,
                              "--format", "jsonl", timeout=60)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
    finally:
        d.stop()
    lines = [ln for ln in err.splitlines() if "Tokio functions not found" in ln]
    assert len(lines) == 1, f"expected one line, got: {err[-1500:]}"
    line = lines[0]
    missing, working = line.split("still working:")
    for g in ("worker_park (", "yield ("):
        assert g in missing, line
    for g in ("task_poll", "worker_run", "sleep", "acquire"):
        assert g in working, line
    meta = read_metadata(out)
    got = sorted(m["group"] for m in meta["discovery"]["missing"])
    assert got == ["worker_park", "yield"], meta["discovery"]
    samples = read_samples(out)
    parked = [s for s in samples if s["park_point"] == "resource_poll" and s["stack"]]
    # Most of the mix demo's samples are yields, which here have no park point: the timer
    # and channel tasks' parks still come with stacks.
    assert len(parked) >= 5, f"only {len(parked)} of {len(samples)} samples park with a stack"
    return line


def register(version):
    def fn():
        return check_release(version)
    fn.__name__ = "tokio_" + version.replace(".", "_")
    test(fn)


for v in releases():
    register(v)

if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        remove_tmpdirs()
    raise SystemExit(rc)
