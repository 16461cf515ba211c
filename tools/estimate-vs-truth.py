#!/usr/bin/env python3
"""Estimates against the demo's own counts: `tools/estimate-vs-truth.py MODE HZ SECONDS [ARGS]`.

Starts build/demo-fp (`--mode hot` or `mix`, 2 workers), profiles it with build/dial9-bpf at
--per-worker-hz HZ for SECONDS (extra dial9-bpf ARGS after them, e.g. --overhead-budget 100),
and prints, per kind of demo task, the Horvitz-Thompson estimate of its resumes (sum of
1 / inclusion_probability) over the demo's true count, on the epochs that every worker sampled
whole, uncapped and calibrated: the check tests/e2e/test_core.py makes, on any workload and
rate. Root. D9_DEMO_ARGS adds arguments to the demo's (e.g. "--idle-tasks 3000"), D9_WORKERS sets
its worker count. D9_FLAVOUR=current profiles build/flavours in that runtime flavour instead
(current: #[tokio::main(flavor = "current_thread")]), MODE then ignored. D9_DEMO=PATH runs
another build of the demo (e.g. build/demo-tokio-1.53.1, the same demo on that Tokio release).
"""
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
import test_core as tc  # noqa: E402
import test_flavours as tf  # noqa: E402
from harness import (DEMO_FP, Demo, clean_epochs, counted_by_fn, counted_vs_truth,  # noqa: E402
                     delivery, read_metadata, read_samples, run_tool)


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("hot", "mix"):
        sys.exit(__doc__)
    mode, hz, secs, extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    flavour = os.environ.get("D9_FLAVOUR")
    if flavour:
        mode = flavour
    binary = tf.FLAVOURS if flavour else os.environ.get("D9_DEMO") or DEMO_FP
    d = Demo(*os.environ.get("D9_DEMO_ARGS", "").split(),
             workers=int(os.environ.get("D9_WORKERS", "2")), mode=mode, binary=binary)
    try:
        d.wait_seconds(2)
        tc._cache["demo"] = d  # estimate_vs_truth reads this demo's counts
        out = tempfile.mkdtemp(prefix="d9-estimate-")
        rc, _, err = run_tool("--pid", d.pid, "--per-worker-hz", hz, "--duration", secs,
                              "--output", out, *extra, timeout=secs + 60, windows=True)
        if rc:
            sys.exit(f"dial9-bpf exited {rc}: {err[-800:]}")
        d.wait_seconds(1)
        meta = read_metadata(out)
        truth = d.seconds()
        with open(os.path.join(out, "truth.json"), "w") as f:
            json.dump(truth, f)  # the demo's own counts per second, for analysis
        counted = counted_vs_truth(meta, truth, clean_epochs(meta) & set(truth))
        try:
            if flavour:
                n, kinds = tf.estimates(d, read_samples(out), meta)
                counted = {k: sum(c["sum"] for c in meta.get("count_terms") or []
                                  if c["epoch"] in tf.good_epochs(meta, truth) and
                                  any(fn in (c["future"] or "") for fn, kk in tf.KIND_OF.items()
                                      if kk == k))
                           for k in tf.KINDS}
            else:
                n, kinds = tc.estimate_vs_truth(read_samples(out), meta)
        except AssertionError as e:
            sys.exit(f"estimate-vs-truth: {e}: profile for longer (20 s or more)")
    finally:
        d.stop()
    est = sum(g for g, _, _ in kinds.values())
    real = sum(r for _, r, _ in kinds.values())
    rates, capped, of = delivery(read_metadata(out))
    print(f"{mode} demo, {hz} Hz, {n} epochs: " + "; ".join(
        f"{k} {g / r:.2f} counted {counted.get(k, 0) / r:.2f} (n={c})"
        for k, (g, r, c) in kinds.items() if r)
        + f"; all {est / real:.2f}; per-worker samples/s "
        + ", ".join(f"{r:.1f}" for r in rates) + f"; capped {capped} of {of} worker-epochs"
        + f"; output {out}")
    if not flavour:
        print("counted by async fn: " + "; ".join(
            f"{fn} {e / r:.2f}" for fn, (e, r) in counted_by_fn(
                meta, truth, clean_epochs(meta) & set(truth)).items() if r))


if __name__ == "__main__":
    main()
