#!/usr/bin/env python3
"""--rotate SECS --keep N: a long run keeps exactly N folders, each a complete set of outputs
readable by `report`, back to back on epoch boundaries; SIGINT completes the folder being
written; bad flags are one line and exit 2."""
import os
import re
import signal
import subprocess
import time

from harness import (ALWAYS_ARMED, TOOL, Demo, check_estimates_probed, estimate_vs_truth,
                     read_metadata, read_samples, remove_tmpdirs, run_all, run_tool, test,
                     tmpdir, wait_stderr)

STAMP = r"[0-9]{8}T[0-9]{6}Z"
FILES = ("samples.jsonl", "perf.data", "profile.pb.gz", "stacks.folded", "flamegraph.svg",
         "metadata.json", "long_polls.jsonl")


def rotated_run(rotate, keep, stop_after, out):
    """Samples the mix demo with --rotate until SIGINT after stop_after seconds of sampling;
    returns the tool's stderr and the demo's seconds (its ground truth)."""
    d = Demo(workers=2, mode="mix")
    log = os.path.join(tmpdir("d9log-rot-"), "stderr")
    try:
        with open(log, "w") as err:
            p = subprocess.Popen([TOOL, "--pid", str(d.pid), "--rotate", str(rotate), "--keep",
                                  str(keep), "--per-worker-hz", "100", "--long-poll-ms", "5",
                                  "--output", out, *ALWAYS_ARMED],
                                 stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_stderr(log, "sampling pid", p, timeout=30)
            time.sleep(stop_after)
            p.send_signal(signal.SIGINT)
            rc = p.wait(60)
            truth = d.seconds()
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    finally:
        d.stop()
        remove_later(d.dir)
    with open(log) as f:
        text = f.read()
    assert rc == 0, f"dial9-bpf exited {rc}: {text[-1500:]}"
    return text, truth


_later = []


def remove_later(path):
    _later.append(path)


def folders(out):
    names = sorted(os.listdir(out))
    assert not [n for n in names if n.startswith(".")], f"temporary names left: {names}"
    return [os.path.join(out, n) for n in names if n != "latest"]


def check_complete(folder):
    """Every output there, metadata parseable, samples and metadata agree, report reads it.
    Returns (metadata, samples)."""
    have = set(os.listdir(folder))
    meta = read_metadata(folder)
    every = read_samples(folder, kind=None)  # on-CPU samples too: metadata counts them
    samples = [s for s in every if s.get("kind", "park") == "park"]
    want = set(FILES) | ({"perf-tasks.elf"} if every else set())
    assert want <= have, f"{folder}: missing {sorted(want - have)}"
    assert not [n for n in have if n.endswith(".tmp")], f"{folder}: {sorted(have)}"
    assert meta["samples"]["written"] == len(every), \
        f"{folder}: metadata says {meta['samples']['written']}, {len(every)} lines"
    rot = meta["rotation"]
    lo, hi = rot["first_epoch"], rot["end_epoch"]
    for s in samples:
        # A poll that outlasts the handover's grace is submitted when it ends: its sample
        # goes into the next folder with its own epoch.
        late = s["idle_end_ns"] + s["poll_duration_ns"] >= lo * 10**9
        assert (s["epoch"] >= lo or late) and (hi is None or s["epoch"] < hi), \
            f"{folder}: a sample of epoch {s['epoch']} outside [{lo}, {hi})"
    for w in meta["workers"]:
        for e in w["epochs"]:
            assert e["epoch"] >= lo and (hi is None or e["epoch"] < hi), \
                f"{folder}: worker epoch {e['epoch']} outside [{lo}, {hi})"
    for c in meta["count_terms"]:
        assert c["epoch"] >= lo and (hi is None or c["epoch"] < hi), \
            f"{folder}: resume counts of epoch {c['epoch']} outside [{lo}, {hi})"
    p = subprocess.run([TOOL, "report", folder], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, f"report {folder} exited {p.returncode}: {p.stderr[-800:]}"
    assert f"{len(every)} written" in p.stdout, p.stdout[-800:]
    return meta, samples


@test
def keeps_n_complete_back_to_back_folders():
    out = tmpdir("d9out-rot-")
    err, truth = rotated_run(2, 3, 11.5, out)
    fs = folders(out)
    assert len(fs) == 3, f"{len(fs)} folders: {fs}\n{err[-800:]}"
    for f in fs:
        assert re.fullmatch(STAMP, os.path.basename(f)), f
    assert os.readlink(os.path.join(out, "latest")) == os.path.basename(fs[-1])
    p = subprocess.run([TOOL, "report", os.path.join(out, "latest")], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, f"report DIR/latest exited {p.returncode}: {p.stderr[-800:]}"
    metas = [check_complete(f) for f in fs]
    for (m0, _), (m1, _) in zip(metas, metas[1:]):
        r0, r1 = m0["rotation"], m1["rotation"]
        assert r1["index"] == r0["index"] + 1, (r0, r1)
        assert r0["end_epoch"] == r1["first_epoch"], (r0, r1)
        assert r0["end_epoch"] - r0["first_epoch"] == 2, r0
        assert m0["sampling_stopped_at_ns"] == m1["sampling_started_at_ns"] \
            == r1["first_epoch"] * 10**9, (m0["sampling_stopped_at_ns"],
                                            m1["sampling_started_at_ns"])
        assert m0["stop_reason"] == "rotated", m0["stop_reason"]
    assert metas[-1][0]["stop_reason"] == "sigint", metas[-1][0]["stop_reason"]
    # Sampled always armed at 100 Hz on two workers: a whole 2 s folder has its share, and the
    # folders' 4-6 whole epochs give the channel tasks ~190 samples (~95 at 50 Hz, below the
    # 100 that folders_estimate needs for a second kind judged).
    whole = [len(s) for _, s in metas[:-1]]
    assert min(whole) >= 40, f"samples per whole folder: {whole}"
    dropped = metas[0][0]["rotation"]["index"]
    assert dropped >= 2, f"only {dropped} folders were removed"
    kinds = folders_estimate(metas, truth)
    return (f"folders {[os.path.basename(f) for f in fs]}, samples {[len(s) for _, s in metas]}, "
            f"{dropped} removed; whole epochs of the folders together: {kinds}")


def folders_estimate(metas, truth):
    """The folders' whole epochs taken together estimate what the demo counted in them, as one
    run would: each folder's weights are those of its own epochs. Within 30%, not the 20% of
    test_estimates.py: these are 4-6 epochs, not 10 or more."""
    first = metas[0][0]["rotation"]["first_epoch"]
    last = metas[-1][0]["sampling_stopped_at_ns"] // 10**9
    merged = {"sampling_started_at_ns": (first - 1) * 10**9,
              "sampling_stopped_at_ns": last * 10**9, "workers": []}
    samples = []
    for meta, ss in metas:
        merged["workers"] += meta["workers"]
        samples += ss
    epochs, kinds = estimate_vs_truth(samples, merged, truth)
    return f"{epochs} epochs, " + "; ".join(check_estimates_probed(kinds, tolerance=0.30))


@test
def sigint_completes_the_current_folder():
    out = tmpdir("d9out-rot-int-")
    rotated_run(600, 2, 2.5, out)[0]
    fs = folders(out)
    assert len(fs) == 1, fs
    meta, samples = check_complete(fs[0])
    assert meta["stop_reason"] == "sigint", meta["stop_reason"]
    assert meta["rotation"]["end_epoch"] is None and meta["rotation"]["index"] == 0
    assert samples, "no samples"
    return f"{len(samples)} samples in {os.path.basename(fs[0])}"


@test
def bad_flags_one_line_exit_2():
    cases = [("--pid", "1", "--rotate", "0"), ("--pid", "1", "--rotate", "abc"),
             ("--pid", "1", "--rotate", "-1"), ("--pid", "1", "--rotate", "2", "--keep", "0"),
             ("--pid", "1", "--keep", "3"), ("--rotate", "2", "--cgroup", "/sys/fs/cgroup")]
    for extra in cases:
        rc, out, err = run_tool(*extra, "-o", tmpdir("d9out-rot-bad-"))
        lines = err.strip().splitlines()
        assert rc == 2 and len(lines) == 1, f"{extra}: exit {rc}, stderr {err!r}"
        assert "--rotate" in lines[0] or "--keep" in lines[0], lines[0]
    return f"{len(cases)} cases"


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        remove_tmpdirs()
        for d in _later:
            subprocess.run(["rm", "-rf", d])
    raise SystemExit(rc)
