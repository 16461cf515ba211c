#!/usr/bin/env python3
"""Late attach: the tool attaches to a demo whose workers have run for a few seconds, so it
misses their worker::run calls. Each must still be keyed by its Arc<Worker> (found in Tokio's
thread-local context, user/target/worker_tls.c), so that a block_in_place after the attach, which hands
the worker to a thread that enters worker::run, continues the same worker instead of starting a
second one."""

from harness import (DEMO_FP, DEMO_NOFP, Demo, check_estimates_probed, check_estimates_windowed,
                     estimate_vs_truth, read_metadata, read_samples, run_all, run_tool, test, tmpdir)

WORKERS = 2
TID_FLAG = 1 << 63  # D9_WORKER_TID_FLAG: a worker keyed by its thread


def profile_late(binary, duration, hz, budget=None):
    """Starts a demo, lets its workers run 3 s, profiles it; returns (demo lines, samples, meta)."""
    d = Demo(binary=binary, workers=WORKERS, mode="mix")
    try:
        d.wait_seconds(3)
        out = tmpdir("d9late-")
        extra = ["--overhead-budget", budget] if budget else []
        rc, _, err = run_tool("--pid", d.pid, "--per-worker-hz", hz, "--duration", duration,
                              "--output", out, "--seed", 11, "--quiet", *extra,
                              timeout=duration + 60, windows=not budget)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        d.wait_seconds(1)
        return d, read_samples(out), read_metadata(out)
    finally:
        d.stop()


def check_identity(d, samples, meta):
    """No worker split: N workers, all found at the attach, handoffs after it followed."""
    workers = meta["workers"]
    keys = [int(w["key"], 16) for w in workers]
    assert len(workers) == WORKERS, f"{len(workers)} workers for --workers {WORKERS}: {workers}"
    assert not [k for k in keys if k & TID_FLAG], f"a worker keyed by thread: {meta['workers']}"
    tls = meta["worker_tls"]
    assert tls["status"] == "resolved" and tls["workers"] == WORKERS, tls
    found = [w for w in workers if w["detection"] == "tls_context"]
    assert len(found) == WORKERS, f"detection {[w['detection'] for w in workers]}"
    assert meta["worker_detection"] == "tls_context", meta["worker_detection"]

    t0, t1 = meta["sampling_started_at_ns"], meta["sampling_stopped_at_ns"]
    handoffs = [b for b in d.lines("blocking") if t0 <= b["start_ns"] and b["end_ns"] <= t1]
    assert len(handoffs) >= 2, f"only {len(handoffs)} block_in_place calls during the run"
    assert any(w["worker_run_seen"] for w in workers), "no handoff seen at worker::run"

    assert samples, "no samples"
    assert {s["worker"] for s in samples} <= set(range(WORKERS)), \
        f"sample workers {sorted({s['worker'] for s in samples})}"
    assert {int(s["worker_key"], 16) if isinstance(s["worker_key"], str) else s["worker_key"]
            for s in samples} <= set(keys), "a sample's worker key is no worker's"
    # A worker handed to another thread keeps its key: some worker sampled on two threads.
    tids = {}
    for s in samples:
        tids.setdefault(s["worker"], set()).add(s["tid"])
    moved = [w for w, t in tids.items() if len(t) > 1]
    assert moved, f"no worker sampled on more than one thread: {tids}"
    return (f"{len(workers)} workers for {WORKERS} ({', '.join(w['detection'] for w in workers)}; "
            f"worker::run seen after the attach for "
            f"{sum(w['worker_run_seen'] for w in workers)}), {len(handoffs)} block_in_place "
            f"calls, threads per worker {sorted(len(t) for t in tids.values())}, "
            f"TLS {tls['symbol'].split('::{')[0]} at tp{tls['tp_offset']:+d} "
            f"word {tls['context_word']}/{tls['worker_word']}")


@test
def late_attach_probed():
    """Every poll probed; the DWARF-unwound build, whose stacks name the kinds as well."""
    d, samples, meta = profile_late(DEMO_NOFP, duration=10, hz=100, budget=100)
    ident = check_identity(d, samples, meta)
    nepochs, kinds = estimate_vs_truth(samples, meta, d.seconds())
    return f"{ident}; {nepochs} epochs; " + "; ".join(check_estimates_probed(kinds))


@test
def late_attach_default_windows():
    """The default windows (20 s: see test_core.py's estimation_with_default_windows)."""
    d, samples, meta = profile_late(DEMO_FP, duration=20, hz=400)
    assert meta["overhead"]["mode"] == "armed_windows", meta["overhead"]["mode"]
    ident = check_identity(d, samples, meta)
    truth = d.seconds()
    nepochs, kinds = estimate_vs_truth(samples, meta, truth)
    return f"{ident}; {nepochs} epochs; " + "; ".join(check_estimates_windowed(kinds, meta, truth))


if __name__ == "__main__":
    raise SystemExit(run_all())
