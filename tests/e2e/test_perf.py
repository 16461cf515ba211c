#!/usr/bin/env python3
"""perf.data output: what Debian's perf (report, script, buildid-list) shows of a real recording.

One demo runs from a private copy of build/demo-fp (so the last test can replace that binary on
disk); one ~6 s recording with --format jsonl,perf is shared by the tests, and samples.jsonl is
the reference every perf figure must match exactly.
"""
import datetime
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from harness import (ALWAYS_ARMED, DEMO_FNS, DEMO_FP, DEMO_NOFP, Demo, TOOL, perf, read_samples, remove_tmpdirs,
                     run_all, run_tool, test, tmpdir)

RECORD_S = 6

_cache = {}


def demo():
    if "demo" not in _cache:
        d = tmpdir("d9perf-bin-")
        exe = os.path.join(d, "dial9-demo")
        shutil.copy2(DEMO_FP, exe)
        dm = Demo(workers=2, mode="mix", binary=exe)
        dm.wait_seconds(1)
        _cache["demo"] = (dm, exe)
    return _cache["demo"]


def recording():
    """(outdir, samples.jsonl, wall-clock start, wall-clock end) of the shared recording."""
    if "rec" not in _cache:
        dm, _ = demo()
        out = tmpdir("d9perf-out-")
        t0 = time.time()
        rc, _, err = run_tool("--pid", dm.pid, "--duration", RECORD_S, "--output", out,
                              "--format", "jsonl,perf", "--seed", 11, timeout=RECORD_S + 60)
        t1 = time.time()
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        samples = read_samples(out)
        assert len(samples) > 20, f"only {len(samples)} samples"
        _cache["rec"] = (out, samples, t0, t1)
    return _cache["rec"]


HEAD = re.compile(r"^\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+(?:(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+)\s+)?"
                  r"(\d+\.\d+):\s+(\d+)\s+(\S+):\s*$")
FRAME = re.compile(r"^\s+([0-9a-f]+) (.*) \((.*)\)$")
BPF_STRING = re.compile(r'^\s+BPF string: "(.*)"$')


def script(path, *extra, home=None):
    """perf script's default output parsed: one dict per sample."""
    res = []
    for line in perf("script", "-i", path, "--ns", *extra, home=home).splitlines():
        m = HEAD.match(line)
        if m:
            res.append({"comm": m[1], "tid": int(m[2]), "tod": m[4],
                        "time_ns": int(m[5].replace(".", "")), "period": int(m[6]),
                        "event": m[7], "frames": [], "meta": {}})
            continue
        m = FRAME.match(line)
        if m and res:
            res[-1]["frames"].append((int(m[1], 16), m[2], m[3]))
            continue
        m = BPF_STRING.match(line)
        if m and res:
            res[-1]["meta"] = dict(kv.split("=", 1) for kv in m[1].split())
    return res


def recorded_script():
    """perf script of the shared recording, while the recorded binary is still on disk."""
    if "script" not in _cache:
        _cache["script"] = script(os.path.join(recording()[0], "perf.data"))
    return _cache["script"]


def report_totals(path, sort="comm"):
    """{event: (samples, event count, {row key: (samples, period)})} from perf report --stdio."""
    out = perf("report", "-i", path, "--stdio", "-n", "--show-total-period", "--no-children",
               "-g", "none", "--sort", sort)
    res, ev = {}, None
    for line in out.splitlines():
        m = re.match(r"^# Samples: (\d+)\s+of event '(.*)'", line)
        if m:
            ev = m[2]
            res[ev] = [int(m[1]), None, {}]
            continue
        m = re.match(r"^# Event count \(approx\.\): (\d+)", line)
        if m and ev:
            res[ev][1] = int(m[1])
            continue
        m = re.match(r"^\s+[\d.]+%\s+(\d+)\s+(\d+)\s+(.*?)\s*$", line)
        if m and ev:
            res[ev][2][m[3]] = (int(m[1]), int(m[2]))
    return res


def demo_fns(names):
    """The demo async fns among frame names: the fn's own frame, not generic wrappers naming it
    (identical code folding gives those several names, perf and dial9 may pick different ones)."""
    names = list(names)  # a generator would be used up by the first fn
    return {fn for fn in DEMO_FNS for n in names if n and n.startswith(f"dial9_demo::{fn}::")}


@test
def script_symbolizes_demo_fns_per_worker():
    out, samples, _, _ = recording()
    _, exe = demo()
    recs = [r for r in recorded_script() if r["event"] == "task-sample"]
    assert len(recs) == len(samples), f"perf script {len(recs)} samples, jsonl {len(samples)}"
    by_key = {(s["tid"], s["timestamp_ns"]): s for s in samples}
    named, biases = 0, set()
    for r in recs:
        s = by_key.get((r["tid"], r["time_ns"]))
        assert s, f"no jsonl sample at tid {r['tid']} time {r['time_ns']}"
        # The comm names the worker the sample ran on, the metadata agrees with the jsonl.
        assert r["comm"] == f"tokio-w{s['worker']}", (r["comm"], s["worker"])
        assert r["meta"].get("worker") == str(s["worker"]), r["meta"]
        assert r["meta"].get("epoch") == str(s["epoch"]), r["meta"]
        assert r["period"] == s["weight_count"]
        # perf's chain holds the physical frames (samples.jsonl adds the calls inlined
        # there), then the task root, which perf names from perf-tasks.elf.
        phys = [f for f in s["stack"] if not f.get("inlined")]
        assert s["future"], f"no future at {r['time_ns']}"
        root = r["frames"][-1]
        assert root[1] == f"task: {s['future']}+0x1", f"root {root} vs future {s['future']}"
        assert root[2] == os.path.join(out, "perf-tasks.elf"), root
        chain = r["frames"][:-1]
        assert len(chain) == len(phys)
        # perf prints addresses relative to the module: one load bias for the whole binary.
        biases |= {int(f["addr"], 16) - pf[0] for f, pf in zip(phys, chain) if pf[2] == exe}
        want = demo_fns(f["name"] for f in phys)
        got = demo_fns(f[1] for f in chain)
        assert got == want, f"perf {got} vs jsonl {want} at {r['time_ns']}"
        named += bool(got)
    assert len(biases) == 1, f"demo frames at inconsistent addresses: {biases}"
    assert named >= len(recs) // 10, f"only {named}/{len(recs)} samples show a demo async fn"
    assert any(r["comm"].startswith("tokio-w") and "cpu_kind_task" in demo_fns(
        f[1] for f in r["frames"]) for r in recs), "no dial9_demo::cpu_kind_task on a worker"
    return f"{len(recs)} samples match samples.jsonl, {named} in a demo async fn"


@test
def report_totals_equal_jsonl_weights():
    out, samples, _, _ = recording()
    path = os.path.join(out, "perf.data")
    tot = report_totals(path, "comm")
    want_count = sum(s["weight_count"] for s in samples)
    want_idle = sum(s["weight_idle_ns"] for s in samples)
    assert set(tot) == {"task-sample", "task-idle-ns"}, tot.keys()
    for ev, want in (("task-sample", want_count), ("task-idle-ns", want_idle)):
        n, count, rows = tot[ev]
        assert n == len(samples), f"{ev}: {n} samples, jsonl {len(samples)}"
        assert count == want, f"{ev}: event count {count}, jsonl sum {want}"
        assert sum(p for _, p in rows.values()) == want, f"{ev}: rows {rows}"
    # Per worker, through the cgroup labels.
    cg = report_totals(path, "cgroup")["task-sample"][2]
    per_worker = {}
    for s in samples:
        per_worker[s["worker"]] = per_worker.get(s["worker"], 0) + s["weight_count"]
    got = {}
    for label, (_, p) in cg.items():
        m = re.match(r"^/worker-(\d+)(/\S+)?$", label)
        assert m, f"cgroup label {label!r}"
        got[int(m[1])] = p
    assert got == per_worker, f"perf per worker {got} vs jsonl {per_worker}"
    return f"task-sample {want_count}, task-idle-ns {want_idle} over {len(samples)} samples"


@test
def report_groups_by_task_root():
    """perf report's callers view starts at the task root: one "task: FUTURE" symbol per task
    type, the weights of its samples."""
    out, samples, _, _ = recording()
    rows = report_totals(os.path.join(out, "perf.data"), "sym")["task-sample"][2]
    want = {}
    for s in samples:
        key = f"[.] task: {s['future']}"
        want[key] = want.get(key, 0) + s["weight_count"]
    out = perf("report", "-i", os.path.join(out, "perf.data"), "--stdio", "--children",
               "-g", "none", "--sort", "sym", "--percent-limit", "0")
    got = {}
    for line in out.splitlines():
        m = re.match(r"^\s+([\d.]+)%\s+[\d.]+%\s+(\[\.\] task: .*?)\s*$", line)
        if m and "task-idle-ns" not in out.split(line)[0].rsplit("# Samples", 1)[-1]:
            got[m[2]] = float(m[1])
    assert set(got) == set(want), f"perf report roots {sorted(got)} vs jsonl {sorted(want)}"
    total = sum(want.values())
    for k, w in want.items():
        assert abs(got[k] - 100.0 * w / total) < 0.02, (k, got[k], 100.0 * w / total)
    assert not any(k.startswith("[.] task: ") for k in rows), "task roots as leaves"
    return f"{len(got)} task roots, their children % as in samples.jsonl"


@test
def no_task_root_leaves_it_out():
    dm, _ = demo()
    out = tmpdir("d9perf-noroot-")
    rc, _, err = run_tool("--pid", dm.pid, "--duration", 2, "--output", out, "--format",
                          "jsonl,perf", "--no-task-root", timeout=60)
    assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
    samples = read_samples(out)
    recs = [r for r in script(os.path.join(out, "perf.data")) if r["event"] == "task-sample"]
    assert recs and len(recs) == len(samples), (len(recs), len(samples))
    roots = [r for r in recs if any(f[1].startswith("task: ") for f in r["frames"])]
    assert not roots, roots[0]
    assert "perf-tasks.elf" not in os.listdir(out), os.listdir(out)
    return f"{len(recs)} samples, no task root"


@test
def buildid_list_has_demo_build_id():
    out, _, _, _ = recording()
    _, exe = demo()
    note = subprocess.run(["readelf", "-n", exe], capture_output=True, text=True).stdout
    bid = re.search(r"Build ID: ([0-9a-f]+)", note)[1]
    ids = dict(reversed(l.split(None, 1)) for l in
               perf("buildid-list", "-i", os.path.join(out, "perf.data")).splitlines())
    assert ids.get(exe) == bid, f"{exe}: {ids.get(exe)} vs readelf {bid}; {ids}"
    assert any("libc.so" in p for p in ids), ids
    return f"{bid} {exe}"


@test
def tod_is_wall_clock():
    out, _, t0, t1 = recording()
    recs = script(os.path.join(out, "perf.data"), "-F", "+tod")
    assert recs and all(r["tod"] for r in recs), "perf script -F +tod printed no time of day"
    tods = [datetime.datetime.strptime(r["tod"][:26], "%Y-%m-%d %H:%M:%S.%f").timestamp()
            for r in recs]
    # Samples are taken while the tool runs; perf prints local time, as strptime reads it.
    assert t0 - 1 <= min(tods) and max(tods) <= t1 + 1, (t0, min(tods), max(tods), t1)
    # And the offset to the monotonic timestamps is the same for every sample.
    offs = [tod - r["time_ns"] / 1e9 for tod, r in zip(tods, recs)]
    assert max(offs) - min(offs) < 1e-3, (min(offs), max(offs))
    return f"first {recs[0]['tod']}, {min(tods) - t0:.2f}s after the tool started"


@test
def sigint_leaves_finished_file():
    dm, _ = demo()
    out = tmpdir("d9perf-int-")
    p = subprocess.Popen([TOOL, "--pid", str(dm.pid), "--output", out, "--format", "jsonl,perf",
                          *ALWAYS_ARMED],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(2.5)
    # While running only the temporary exists: nobody can open a half-written perf.data.
    during = (os.path.exists(os.path.join(out, "perf.data.tmp")),
              os.path.exists(os.path.join(out, "perf.data")))
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=30)
    assert p.returncode == 0, f"dial9-bpf exited {p.returncode}: {err[-1500:]}"
    assert during == (True, False), f"during the run (tmp, final) = {during}"
    assert sorted(os.listdir(out)).count("perf.data.tmp") == 0, os.listdir(out)
    samples = read_samples(out)
    assert samples, "no samples before SIGINT"
    tot = report_totals(os.path.join(out, "perf.data"))
    assert tot["task-sample"][1] == sum(s["weight_count"] for s in samples), tot
    assert tot["task-idle-ns"][1] == sum(s["weight_idle_ns"] for s in samples), tot
    hdr = perf("report", "-i", os.path.join(out, "perf.data"), "--header-only")
    assert "task-sample" in hdr and "clockid: monotonic" in hdr, hdr[-1500:]
    return f"{len(samples)} samples after SIGINT"


@test
def stale_build_id_shows_no_wrong_symbols():
    """The binary on disk is replaced by another build: perf must not symbolize with it."""
    out, _, _, _ = recording()
    dm, exe = demo()
    path = os.path.join(out, "perf.data")
    direct = recorded_script()
    cache_home = tmpdir("d9perf-cache-")
    # A build-id cache made while the recorded binary was still on disk (like perf record does).
    perf("buildid-cache", "-a", exe, home=cache_home)
    dm.stop()
    orig = exe + ".orig"
    os.replace(exe, orig)
    shutil.copy2(DEMO_NOFP, exe + ".new")
    os.replace(exe + ".new", exe)
    try:
        fresh = script(path, home=tmpdir("d9perf-home-"))
        cached = script(path, home=cache_home)
    finally:
        os.replace(orig, exe)
    demo_frames = [f for r in fresh for f in r["frames"] if f[2] == exe]
    assert demo_frames, "no frames in the demo binary"
    wrong = [f for f in demo_frames if f[1] != "[unknown]"]
    assert not wrong, f"{len(wrong)} frames symbolized with the replaced binary: {wrong[:3]}"
    # Same addresses; the build-id cache still gives the names perf showed before.
    assert [f[0] for r in fresh for f in r["frames"]] == [f[0] for r in direct
                                                          for f in r["frames"]]
    assert [f for r in cached for f in r["frames"]] == [f for r in direct for f in r["frames"]]
    named = demo_fns(f[1] for r in cached for f in r["frames"])
    assert named, "the build-id cache copy did not symbolize"
    return (f"{len(demo_frames)} demo frames [unknown] without a cache; "
            f"from ~/.debug: {sorted(named)}")


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        if "demo" in _cache:
            _cache["demo"][0].stop()
        remove_tmpdirs()
    raise SystemExit(rc)
