#!/usr/bin/env python3
"""--unwind ebpf: stacks walked in BPF from .eh_frame tables agree with userspace DWARF.

Builds without frame pointers (a plain `cargo build --release`, and the release build with line
tables): the same demo sampled with --unwind ebpf and with --unwind dwarf. Every return address of
a correct walk follows a call instruction in the binary, where a wrong CFA rule lands on an
arbitrary address; and the demo's park points are few and its stacks repeat, so most ebpf
stacks are ones the dwarf run, sampled separately, also saw whole."""
import json
import os

from harness import (ALWAYS_ARMED, DEMO_FNS, DEMO_NOFP, DEMO_PLAIN, Demo, frame_names,
                     read_metadata, read_samples, run_all, run_tool, test, tmpdir)

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
        out = tmpdir(f"d9ebpf-{unwind}-")
        rc, _, err = run_tool("--pid", _cache[binary].pid, "--duration", 3, "--output", out,
                              "--unwind", unwind, "--per-worker-hz", 100, "--format", "jsonl",
                              *ALWAYS_ARMED)
        assert rc == 0, err[-1500:]
        _cache[key] = (read_samples(out), read_metadata(out))
    return _cache[key]


def modrm_len(b, i):
    """Length of an x86-64 instruction that is opcode FF at b[i] followed by its ModRM (and
    SIB, displacement); 0 when b is too short."""
    if i + 1 >= len(b):
        return 0
    mod, rm = b[i + 1] >> 6, b[i + 1] & 7
    n = 2
    if mod != 3 and rm == 4:
        if i + 2 >= len(b):
            return 0
        n += 1
        if mod == 0 and (b[i + 2] & 7) == 5:
            n += 4
    n += {1: 1, 2: 4}.get(mod, 0)
    if mod == 0 and rm == 5:
        n += 4
    return n


def follows_call(before):
    """Whether the bytes before a return address end with a call: E8 rel32, or FF /2 with any
    addressing (register, memory, rip-relative)."""
    if len(before) >= 5 and before[-5] == 0xE8:
        return True
    for k in range(2, 8):
        i = len(before) - k
        if i >= 0 and before[i] == 0xFF and (before[i + 1] >> 3) & 7 == 2 and \
                modrm_len(before, i) == k:
            return True
    return False


def return_addresses_follow_calls(sample, pid):
    """Whether every return address of the stack (each frame's address after the leaf's;
    inlined frames share their caller's) follows a call in its file. The frame on top of a
    stack taken at a call (a park point's entry or return) is its call site, one byte into
    the call (sampler.bpf.c, capture_park)."""
    maps = _cache.setdefault(("maps", pid), open(f"/proc/{pid}/maps").read().splitlines())
    addrs = []
    for f in sample["stack"]:
        if f.get("addr") and f.get("module") and (not addrs or addrs[-1][0] != f["addr"]):
            addrs.append((f["addr"], f["module"]))
    for addr, module in addrs[1:]:
        a = int(addr, 16)
        for line in maps:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= a < hi and len(parts) >= 6 and parts[5] == module:
                off = a - lo + int(parts[2], 16)
                with open(module, "rb") as fh:
                    fh.seek(max(0, off - 8))
                    b = fh.read(min(8, off) + 1)
                if not (follows_call(b[:-1]) or follows_call(b)):
                    return False
                break
        else:
            return False
    return True


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
    pid = _cache[binary].pid
    called = sum(1 for s in eb if return_addresses_follow_calls(s, pid)) / len(eb)
    dw_called = sum(1 for s in dw if return_addresses_follow_calls(s, pid)) / len(dw)
    whole = sum(1 for s in eb if has(s, DEMO_FNS) and has(s, POLL_MACHINERY)) / len(eb)
    depth = sum(len(s["stack"]) for s in eb) / len(eb)
    dw_depth = sum(len(s["stack"]) for s in dw) / len(dw)
    walks = meta["unwind"]["ebpf"]["walks"]
    res = (f"{called:.1%} of {len(eb)} ebpf stacks' return addresses follow calls "
           f"(dwarf's {dw_called:.1%}); {same:.1%} also in dwarf's {len(dw)}, {stepped:.1%} "
           f"made of its steps; {whole:.1%} whole")
    assert called >= 0.99, res
    assert whole >= 0.95, res
    assert walks["complete"] >= 0.95 * sum(walks.values()), walks
    return (res + "; "
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
    out = tmpdir("d9ebpf-lp-")
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
