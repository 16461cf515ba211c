#!/usr/bin/env python3
"""perf.data in dwarf mode: perf's own DWARF unwinding of the raw stacks dial9-bpf copied.

build/demo-nofp has no frame pointers, so dial9-bpf copies registers and the top of the user
stack at park points (--unwind dwarf), and perf.data gets a third event,
task-sample-raw, whose records carry PERF_SAMPLE_REGS_USER/STACK_USER and no callchain: perf
script and perf report unwind them themselves (see the comment at the top of
user/output/perf_writer.c). One ~5 s recording with --format jsonl,perf is shared by the tests;
samples.jsonl is the reference for keys and weights.

Also a helper for cross-checks, perf_frames(): perf script's frames per sample, keyed by
(tid, timestamp_ns) like samples.jsonl. From the command line,
    tests/e2e/test_dwarf_perf.py --perf-frames DIR/perf.data [--event task-sample-raw]
prints them as JSON lines: {"tid", "timestamp_ns", "event", "period", "frames": [{"name",
"inlined"}, ...]}, leaf first.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import sys

from harness import (DEMO_FNS, DEMO_NOFP, Demo, perf, read_metadata, read_samples, remove_tmpdirs,
                     run_all, run_tool, test, tmpdir)

RAW_EVENT = "task-sample-raw"
RECORD_S = 5

_cache = {}


# perf script -F comm,tid,time,event,period,ip,sym --ns: a header line per sample, then one
# line per frame, "<module-relative address> <function>", " (inlined)" appended to frames perf
# found inlined at the address of the physical frame that follows them.
SCRIPT_HEAD = re.compile(r"^\s*\S.*?\s(\d+)\s+(\d+)\.(\d{9}):\s+(\d+)\s+(\S+):\s*$")
SCRIPT_FRAME = re.compile(r"^\s+[0-9a-f]+ (.*?)( \(inlined\))?$")


def perf_frames(perf_data, event=RAW_EVENT, home=None):
    """{(tid, timestamp_ns): {"period": int, "frames": [{"name", "inlined"}, ...]}} for the
    samples of one event as perf script shows them, leaf first, function names only
    ("[unknown]" where perf has none). For task-sample-raw that is perf's own DWARF unwinding
    (with inlined frames); for task-sample, dial9's own chain of physical frames (perf 6.1
    expands inlined calls only in what it unwinds itself)."""
    out = perf("script", "-i", perf_data, "--ns", "--inline",
               "-F", "comm,tid,time,event,period,ip,sym", home=home)
    res, cur = {}, None
    for line in out.splitlines():
        m = SCRIPT_HEAD.match(line)
        if m:
            cur = None
            if m[5] == event:
                key = (int(m[1]), int(m[2]) * 10**9 + int(m[3]))
                assert key not in res, f"two {event} samples at {key}"
                cur = res[key] = {"period": int(m[4]), "frames": []}
            continue
        m = SCRIPT_FRAME.match(line)
        if m and cur is not None:
            cur["frames"].append({"name": m[1], "inlined": bool(m[2])})
    return res


def raw_dumps(perf_data):
    """{(tid, timestamp_ns): stack bytes} of the records with a user stack dump (perf report
    -D prints "ustack: size N", the dyn_size, for every record of an event with STACK_USER)."""
    res, key = {}, None
    for line in perf("report", "-D", "-i", perf_data).splitlines():
        m = re.match(r"^\d+ (\d+) 0x[0-9a-f]+ \[0x[0-9a-f]+\]: PERF_RECORD_SAMPLE\(.*\): "
                     r"\d+/(\d+):", line)
        if m:
            key = (int(m[2]), int(m[1]))
            continue
        m = re.match(r"^\.\.\. ustack: size (\d+)", line)
        if m and key:
            assert key not in res, f"two stack dumps at {key}"
            res[key] = int(m[1])
            key = None
    return res


def demo_fns(names):
    """The demo async fns among frame names (their own frames, as in test_perf.py)."""
    names = list(names)  # a generator would be spent after the first fn
    return {fn for fn in DEMO_FNS for n in names if n and n.startswith(f"dial9_demo::{fn}::")}


def recording():
    """(outdir, samples.jsonl, metadata) of the shared recording of demo-nofp."""
    if "rec" not in _cache:
        dm = Demo(workers=2, mode="mix", binary=DEMO_NOFP)
        _cache["demo"] = dm
        dm.wait_seconds(1)
        out = tmpdir("d9dwarf-out-")
        rc, _, err = run_tool("--pid", dm.pid, "--duration", RECORD_S, "--output", out,
                              "--format", "jsonl,perf", "--seed", 13, "--unwind", "dwarf",
                              timeout=RECORD_S + 60)
        dm.stop()
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        samples = read_samples(out)
        assert len(samples) > 20, f"only {len(samples)} samples"
        _cache["rec"] = (out, samples, read_metadata(out))
    return _cache["rec"]


def raw_frames():
    if "frames" not in _cache:
        _cache["frames"] = perf_frames(os.path.join(recording()[0], "perf.data"))
    return _cache["frames"]


@test
def dwarf_run_declares_raw_event():
    out, _, meta = recording()
    assert meta["unwind"]["mode"] == "dwarf", meta["unwind"]
    hdr = perf("report", "-i", os.path.join(out, "perf.data"), "--header-only")
    events = {m[1]: m[2] for m in re.finditer(r"^# event : name = ([^,]+), (.*)$", hdr, re.M)}
    assert set(events) == {"task-sample", "task-idle-ns", RAW_EVENT}, events.keys()
    raw = events[RAW_EVENT]
    for want in ("REGS_USER|STACK_USER", "sample_regs_user = 0x1c0", "exclude_callchain_user = 1",
                 "sample_stack_user = "):
        assert want in raw, f"{RAW_EVENT} lacks {want!r}: {raw}"
    # Our own chain stays on the other events, which perf must not unwind on top of it.
    for ev in ("task-sample", "task-idle-ns"):
        assert "REGS_USER" not in events[ev], events[ev]
    return f"stack_size {meta['unwind']['stack_size']}"


@test
def perf_unwinds_raw_stacks_to_demo_fns():
    out, samples, _ = recording()
    frames = raw_frames()
    dumps = raw_dumps(os.path.join(out, "perf.data"))
    by_key = {(s["tid"], s["timestamp_ns"]): s for s in samples}
    assert set(frames) == set(dumps), (f"{len(frames)} {RAW_EVENT} samples in perf script, "
                                       f"{len(dumps)} with a dump in perf report -D")
    for key, rec in frames.items():
        s = by_key.get(key)
        assert s, f"{RAW_EVENT} at tid {key[0]} time {key[1]} is no jsonl sample"
        assert rec["period"] == s["weight_count"], (key, rec["period"], s["weight_count"])
    with_dump = [k for k, size in dumps.items() if size > 0]
    assert len(with_dump) >= len(samples) // 2, (
        f"only {len(with_dump)} of {len(samples)} samples have a stack dump")
    named = [k for k in with_dump if demo_fns(f["name"] for f in frames[k]["frames"])]
    assert len(named) * 10 >= len(with_dump) * 9, (
        f"perf's unwinding shows a demo async fn in {len(named)}/{len(with_dump)} samples; "
        f"e.g. {[f['name'] for f in frames[next(k for k in with_dump if k not in named)]['frames']]}")
    seen = set().union(*(demo_fns(f["name"] for f in frames[k]["frames"]) for k in named))
    assert "cpu_kind_task" in seen, seen
    # The leaf is where the registers point: dial9 names it first too, as the function there or
    # (when it expands inlined calls) the innermost call inlined there.
    leaf_ok = 0
    for k in with_dump:
        at_leaf = []
        for f in frames[k]["frames"]:
            at_leaf.append(f["name"])
            if not f["inlined"]:
                break
        stack = by_key[k]["stack"]
        leaf_ok += bool(stack and stack[0]["name"] in at_leaf)
    assert leaf_ok * 10 >= len(with_dump) * 9, f"leaf agrees in {leaf_ok}/{len(with_dump)}"
    depth = sorted(len(frames[k]["frames"]) for k in with_dump)[len(with_dump) // 2]
    return (f"{len(named)}/{len(with_dump)} dumps unwind to a demo async fn ({sorted(seen)}), "
            f"{len(with_dump)}/{len(samples)} samples have one, median {depth} frames, "
            f"leaf as in jsonl {leaf_ok}/{len(with_dump)}")


def report_totals(path):
    """{event: (samples, event count, sum of row periods)} from perf report --stdio."""
    out = perf("report", "-i", path, "--stdio", "-n", "--show-total-period", "--no-children",
               "-g", "none", "--sort", "comm")
    res, ev = {}, None
    for line in out.splitlines():
        m = re.match(r"^# Samples: (\d+)\s+of event '(.*)'", line)
        if m:
            ev = m[2]
            res[ev] = [int(m[1]), None, 0]
            continue
        m = re.match(r"^# Event count \(approx\.\): (\d+)", line)
        if m and ev:
            res[ev][1] = int(m[1])
            continue
        m = re.match(r"^\s+[\d.]+%\s+(\d+)\s+(\d+)\s+(.*?)\s*$", line)
        if m and ev:
            res[ev][2] += int(m[2])
    return res


@test
def report_totals_equal_jsonl_weights():
    out, samples, _ = recording()
    tot = report_totals(os.path.join(out, "perf.data"))
    raw_keys = set(raw_frames())
    raw_samples = [s for s in samples if (s["tid"], s["timestamp_ns"]) in raw_keys]
    want = {
        "task-sample": (len(samples), sum(s["weight_count"] for s in samples)),
        "task-idle-ns": (len(samples), sum(s["weight_idle_ns"] for s in samples)),
        RAW_EVENT: (len(raw_samples), sum(s["weight_count"] for s in raw_samples)),
    }
    assert set(tot) == set(want), tot.keys()
    for ev, (n, total) in want.items():
        assert tot[ev][0] == n, f"{ev}: {tot[ev][0]} samples, jsonl {n}"
        assert tot[ev][1] == total, f"{ev}: event count {tot[ev][1]}, jsonl sum {total}"
        assert tot[ev][2] == total, f"{ev}: rows sum to {tot[ev][2]}, jsonl {total}"
    return ", ".join(f"{ev} {total}" for ev, (_, total) in want.items())


def dump_frames_main(argv):
    """--perf-frames PERF_DATA [--event EVENT]: perf_frames() as JSON lines."""
    path = argv[argv.index("--perf-frames") + 1]
    event = argv[argv.index("--event") + 1] if "--event" in argv else RAW_EVENT
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # | head
    home = tmpdir("d9dwarf-home-")
    try:
        for (tid, ts), rec in sorted(perf_frames(path, event, home=home).items(),
                                     key=lambda kv: (kv[0][1], kv[0][0])):
            print(json.dumps({"tid": tid, "timestamp_ns": ts, "event": event,
                              "period": rec["period"], "frames": rec["frames"]}))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    return 0


if __name__ == "__main__":
    if "--perf-frames" in sys.argv:
        raise SystemExit(dump_frames_main(sys.argv))
    try:
        rc = run_all()
    finally:
        if "demo" in _cache:
            _cache["demo"].stop()
        remove_tmpdirs()
    raise SystemExit(rc)
