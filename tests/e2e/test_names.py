#!/usr/bin/env python3
"""Names on the builds users ship: the demo built four ways (frame pointers + debug info, no
frame pointers + debug info, a plain `cargo build --release`, and that build stripped with its
debug file in a build-id tree). Each way, nearly every sample names one of the demo's async fns
in its stack or its task's future, and the estimates per kind, classified by those names, match
the demo's own counts. Every poll is probed (--overhead-budget 100), so the test judges the
naming, not the windows' noise."""
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(__file__))
from harness import (ALWAYS_ARMED, DEMO_FNS, DEMO_FP, DEMO_NOFP, DEMO_PLAIN,  # noqa: E402
                     DEMO_PLAIN_STRIPPED, KIND_OF, Demo, check_estimates_probed,
                     estimate_vs_truth, frame_names, kind_of, read_metadata, read_samples,
                     run_all, run_tool, test, tmpdir)

DURATION = 7
HZ = 400
NAMED_MIN = 0.95
TOLERANCE = 0.25


def kind_named(sample):
    """The kind by the innermost demo async fn on the stack, else by the task's future."""
    k = kind_of(sample)
    if k is None:
        for fn, kind in KIND_OF.items():
            if fn in (sample.get("future") or ""):
                return kind
    return k


def names_demo_fn(sample):
    return any(fn in name for name in frame_names(sample) + [sample.get("future") or ""]
               for fn in DEMO_FNS)


def debug_tree(stripped):
    """A build-id tree holding the stripped binary's debug file."""
    out = subprocess.run(["readelf", "-n", stripped], check=True, capture_output=True,
                         text=True).stdout
    bid = next(l.split()[-1] for l in out.splitlines() if "Build ID:" in l)
    tree = tmpdir("d9names-tree-")
    os.makedirs(os.path.join(tree, ".build-id", bid[:2]))
    shutil.copy(stripped + ".debug", os.path.join(tree, ".build-id", bid[:2], bid[2:] + ".debug"))
    return tree


def profile(binary, *args):
    d = Demo(binary=binary, workers=2, mode="mix")
    try:
        d.wait_seconds(1)
        out = tmpdir("d9names-out-")
        rc, _, err = run_tool("--pid", d.pid, "--per-worker-hz", HZ, "--duration", DURATION,
                              "--output", out, "--format", "jsonl", "--seed", 7, *args,
                              *ALWAYS_ARMED, timeout=DURATION + 60)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        d.wait_seconds(1)
        truth = d.seconds()
    finally:
        d.stop()
    return read_samples(out), read_metadata(out), truth


def check(binary, *args):
    samples, meta, truth = profile(binary, *args)
    assert len(samples) >= 500, f"only {len(samples)} samples"
    named = sum(1 for s in samples if names_demo_fn(s))
    by_stack = sum(1 for s in samples if kind_of(s))
    share = named / len(samples)
    nepochs, kinds = estimate_vs_truth(samples, meta, truth, classify=kind_named)
    res = check_estimates_probed(kinds, TOLERANCE)
    assert share >= NAMED_MIN, \
        f"{named}/{len(samples)} samples name a demo fn; " + "; ".join(res)
    methods = {}
    for t in meta["task_types"]:
        methods[t["named_by"]] = methods.get(t["named_by"], 0) + 1
    ratios = [f"{k} {got / real:.2f} (n={n})" for k, (got, real, n) in kinds.items() if real]
    return (f"unwind {meta['unwind']['mode']}; named {share:.3f} ({by_stack / len(samples):.3f}"
            f" by stack alone); {nepochs} epochs; estimate/truth " + ", ".join(ratios) +
            f"; task types by method {methods}")


@test
def fp_with_debug_info():
    """Frame pointers: the calls inlined at each return address come from DWARF."""
    return check(DEMO_FP)


@test
def no_fp_with_debug_info():
    return check(DEMO_NOFP)


@test
def plain_release():
    """No debug info, legacy mangling: the future names what the stack cannot."""
    return check(DEMO_PLAIN)


@test
def plain_release_stripped():
    """Stripped, its debug file found in a build-id tree (--debug-dir)."""
    return check(DEMO_PLAIN_STRIPPED, "--debug-dir", debug_tree(DEMO_PLAIN_STRIPPED))


if __name__ == "__main__":
    run_all()
