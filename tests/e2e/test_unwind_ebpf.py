#!/usr/bin/env python3
"""--unwind ebpf: stacks walked in BPF from .eh_frame tables agree with userspace DWARF.

Builds without frame pointers (a plain `cargo build --release`, and the release build with line
tables): the same demo sampled with --unwind ebpf and with --unwind dwarf. The demo's park
points are few and its stacks repeat, so a correct ebpf stack is made of steps (callee to
caller) the dwarf run also took, and is most often one it also saw whole."""
import json
import os
import tempfile

from harness import (ALWAYS_ARMED, DEMO_FNS, DEMO_NOFP, DEMO_PLAIN, Demo, frame_names,
                     read_metadata, read_samples, run_all, run_tool, test)

POLL_MACHINERY = ("Harness<T,S>::poll", "raw::poll", "RawTask::poll", "run_task")

_cache = {}


def names(sample):
    return tuple(frame_names(sample))


def has(sample, needles):
    return any(n in name for name in names(sample) for n in needles)


def run(binary, unwind):
    key = (binary, unwind)
    if key not in _cache:
        if binary not in _cache:
            d = Demo(binary=binary)
            d.wait_seconds(1)
            _cache[binary] = d
        out = tempfile.mkdtemp(prefix=f"d9ebpf-{unwind}-")
        rc, _, err = run_tool("--pid", _cache[binary].pid, "--duration", 3, "--output", out,
                              "--unwind", unwind, "--per-worker-hz", 100, "--format", "jsonl",
                              *ALWAYS_ARMED)
        assert rc == 0, err[-1500:]
        _cache[key] = (read_samples(out), read_metadata(out))
    return _cache[key]


def agree(binary):
    eb, meta = run(binary, "ebpf")
    dw, _ = run(binary, "dwarf")
    assert meta["unwind"]["mode"] == "ebpf", meta["unwind"]
    assert len(eb) >= 50 and len(dw) >= 50, f"{len(eb)} ebpf, {len(dw)} dwarf samples"
    seen = {names(s) for s in dw}
    same = sum(1 for s in eb if names(s) in seen) / len(eb)
    # A stack the dwarf run did not happen to draw can still be right: each step of a right
    # walk (callee -> caller) is one the dwarf run also took, where a wrong CFA rule lands on
    # a frame no real call chain has.
    steps = {pair for s in dw for pair in zip(names(s), names(s)[1:])}
    stepped = sum(1 for s in eb if all(p in steps for p in zip(names(s), names(s)[1:])))
    stepped /= len(eb)
    whole = sum(1 for s in eb if has(s, DEMO_FNS) and has(s, POLL_MACHINERY)) / len(eb)
    depth = sum(len(s["stack"]) for s in eb) / len(eb)
    dw_depth = sum(len(s["stack"]) for s in dw) / len(dw)
    walks = meta["unwind"]["ebpf"]["walks"]
    assert stepped >= 0.95, \
        f"{stepped:.1%} of {len(eb)} ebpf stacks made of dwarf's steps ({same:.1%} whole seen)"
    assert whole >= 0.95, f"{whole:.1%} of ebpf stacks reach the demo's async fns and Tokio"
    assert walks["complete"] >= 0.95 * sum(walks.values()), walks
    return (f"{same:.1%} of {len(eb)} ebpf stacks also in dwarf's {len(dw)}, {stepped:.1%} made "
            f"of its steps; {whole:.1%} whole; "
            f"depth {depth:.1f} vs {dw_depth:.1f}; walks {walks}; "
            f"{meta['unwind']['ebpf']['rows']} rows")


@test
def plain_release_build_agrees_with_dwarf():
    return agree(DEMO_PLAIN)


@test
def release_build_with_line_tables_agrees_with_dwarf():
    return agree(DEMO_NOFP)


@test
def ebpf_mode_copies_no_stack():
    """The cost this mode removes: no raw stack copy, no userspace unwinding."""
    _, meta = run(DEMO_PLAIN, "ebpf")
    assert meta["unwind"]["samples"] == 0, meta["unwind"]
    return f"{meta['unwind']['ebpf']}"


@test
def long_poll_stacks_are_whole():
    """Ticks and scheduler switches inside long polls walk from the task's user registers:
    without frame pointers bpf_get_stack loses everything above the leaf."""
    d = Demo("--long-poll-tasks", "1", binary=DEMO_PLAIN, workers=2, mode="mix")
    _cache["lp-demo"] = d
    d.wait_seconds(2)
    out = tempfile.mkdtemp(prefix="d9ebpf-lp-")
    rc, _, err = run_tool("--pid", d.pid, "--duration", 6, "--output", out, "--unwind", "ebpf",
                          "--long-poll-ms", 10, "--format", "jsonl")
    assert rc == 0, err[-1500:]
    with open(os.path.join(out, "long_polls.jsonl")) as f:
        polls = [json.loads(line) for line in f]
    whole = [p for p in polls if any("long_poll_task" in n for n in frame_names(p))]
    assert len(polls) >= 10, f"{len(polls)} long polls"
    assert len(whole) >= 0.9 * len(polls), f"{len(whole)}/{len(polls)} name the polled task"
    depth = sum(len(p["stack"]) for p in polls) / len(polls)
    return f"{len(whole)}/{len(polls)} long polls' stacks reach the task's future; {depth:.1f} frames"


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        for k, v in list(_cache.items()):
            if isinstance(v, Demo):
                v.stop()
    raise SystemExit(rc)
