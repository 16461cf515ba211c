#!/usr/bin/env python3
"""Where a profiler's cost goes in steady state: `tools/bench-steady.py [--seg 12] [--rounds 5]
CONFIG...`

Throughput A/B runs (tools/bench-ab.py) have a noise sd of ~0.4% per segment on this kind of
VM, and at 99 Hz both dial9-bpf and perf cost ~0.2-0.4%. This splits the cost into parts that
can be read more exactly. ONE hot demo runs throughout; profiled runs are interleaved with
unprofiled ones (base, X1, base, X2, ...), and each profiled run is compared with the
unprofiled runs either side of it, over its steady seconds only (from 2 s after it starts to
1 s before it ends, whole CLOCK_MONOTONIC seconds):
- stolen: CPU the demo's threads did not get (their schedstat run time, in ns) -- the
  profiler's own process, the kernel work it causes outside the target, and what its wakeups
  cost the workers;
- wait: the demo threads' extra run-queue wait (schedstat);
- cpu/work: the demo's CPU per unit of work -- what the profiler costs inside the target
  (uprobe hits, or perf's sampling interrupts);
- loss: work/s, as bench-ab.py reports it;
- tool s: the profiler's whole CPU (rusage), start and finish included.

CONFIG is NAME:BINARY [ARGS...] for a dial9-bpf build (run with --pid, -d, -o and --quiet
added), or dwarf / fp for `perf record --call-graph dwarf` / `-g` at -F 99. Root.

    tools/bench-steady.py --rounds 6 'd9:build/dial9-bpf --per-worker-hz 99' dwarf
"""
import argparse
import importlib.util
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("bo", os.path.join(ROOT, "tools", "bench-overhead.py"))
bo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bo)
NS = 10**9


def sched(pid):
    """Sum over the process's threads of schedstat: (run time ns, run-queue wait ns)."""
    cpu = wait = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                a = f.read().split()
        except OSError:
            continue  # a thread that just exited
        cpu += int(a[0])
        wait += int(a[1])
    return cpu, wait


class Marks:
    """schedstat of the demo read just after every whole CLOCK_MONOTONIC second."""

    def __init__(self, pid):
        self.pid, self.at, self.stop = pid, {}, threading.Event()
        self.thr = threading.Thread(target=self._loop, daemon=True)
        self.thr.start()

    def _loop(self):
        while not self.stop.is_set():
            time.sleep((NS - bo.mono_ns() % NS) / 1e9)
            sec = bo.mono_ns() // NS
            try:
                self.at[sec] = sched(self.pid)
            except OSError:
                return


def command(cfg, pid, seg, wd):
    name, _, rest = cfg.partition(":")
    if name == "base":
        return ["sleep", str(seg)]
    if name in ("dwarf", "fp"):
        cg = ["--call-graph", "dwarf"] if name == "dwarf" else ["-g"]
        return ["perf", "record", "-q", "-F", "99", *cg, "-p", str(pid),
                "-o", os.path.join(wd, "perf.data"), "--", "sleep", str(seg)]
    args = rest.split()
    if not args:
        raise SystemExit(f"{cfg}: give NAME:BINARY [ARGS...], dwarf or fp")
    out = os.path.join(wd, "out")
    shutil.rmtree(out, ignore_errors=True)
    return [args[0], "--pid", str(pid), "-d", str(seg), "-o", out, "--quiet", *args[1:]]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seg", type=int, default=12, help="seconds per run (default 12)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("configs", nargs="+")
    a = ap.parse_args()
    if a.seg < 5:
        raise SystemExit("--seg must be at least 5: the steady seconds are 2 s in to 1 s before the end")
    wd = tempfile.mkdtemp(prefix="bench-steady-")
    bo.DEMO = os.path.join(ROOT, "build", "demo-fp")
    demo = bo.Demo(wd, "hot", 2)
    marks = Marks(demo.pid)
    runs = []
    try:
        time.sleep(3)
        plan = ["base"] + [x for _ in range(a.rounds) for c in a.configs for x in (c, "base")]
        for i, cfg in enumerate(plan):
            cmd = command(cfg, demo.pid, a.seg, wd)
            r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
            t0 = bo.mono_ns()
            p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            t1 = bo.mono_ns()
            r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
            if p.returncode:
                raise SystemExit(f"{cmd[0]} exited {p.returncode}: {p.stderr.strip()[-300:]}")
            runs.append(dict(name=cfg.partition(":")[0], a=-(-t0 // NS) + 2, b=t1 // NS - 1,
                             tool=r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime))
            print(f"[{i + 1}/{len(plan)}] {runs[-1]['name']}", flush=True)
            time.sleep(0.3)
        time.sleep(1.5)  # the last second's mark and line
    finally:
        marks.stop.set()
        secs = demo.seconds()
        demo.stop()
    for r in runs:
        n = r["b"] - r["a"]
        if n <= 0 or r["a"] not in marks.at or r["b"] not in marks.at:
            raise SystemExit(f"a run of {r['name']} has no steady seconds: raise --seg")
        r["cpu"] = (marks.at[r["b"]][0] - marks.at[r["a"]][0]) / n / 1e6  # ms per s
        r["wait"] = (marks.at[r["b"]][1] - marks.at[r["a"]][1]) / n / 1e6
        r["work"] = sum(secs[s]["work"] for s in range(r["a"], r["b"])) / n
        r["cpw"] = r["cpu"] / r["work"]
    agg = {}
    for i, r in enumerate(runs):
        if r["name"] == "base":
            continue
        p, q = runs[i - 1], runs[i + 1]
        agg.setdefault(r["name"], []).append({
            "stolen ms/s": (p["cpu"] + q["cpu"]) / 2 - r["cpu"],
            "wait ms/s": r["wait"] - (p["wait"] + q["wait"]) / 2,
            "cpu/work x": 2 * r["cpw"] / (p["cpw"] + q["cpw"]),
            "loss %": 100 * (1 - 2 * r["work"] / (p["work"] + q["work"])),
            "tool s": r["tool"]})
    base = [r for r in runs if r["name"] == "base"]
    print(f"\nunprofiled: demo CPU {statistics.mean(r['cpu'] for r in base):.1f} ms/s, "
          f"{statistics.mean(r['work'] for r in base):,.0f} work units/s; "
          f"steady seconds per run {runs[0]['b'] - runs[0]['a']}")
    print("mean (sd) [median] per profiled run against the unprofiled runs either side:")
    for name, ds in agg.items():
        cols = []
        for k in ds[0]:
            v = [d[k] for d in ds]
            sd = statistics.stdev(v) if len(v) > 1 else 0.0
            cols.append(f"{k} {statistics.mean(v):.4f} ({sd:.4f}) [{statistics.median(v):.4f}]")
        print(f"{name:10s} n={len(ds)}  " + "  ".join(cols))
    # Round by round against the first configuration (mean +- standard error).
    names = list(agg)
    for name in names[1:]:
        cols = []
        for k in ("stolen ms/s", "cpu/work x", "loss %"):
            d = [x[k] - y[k] for x, y in zip(agg[names[0]], agg[name])]
            se = statistics.stdev(d) / len(d) ** 0.5 if len(d) > 1 else 0.0
            cols.append(f"{k} {statistics.mean(d):+.4f} +- {se:.4f}")
        print(f"{names[0]} - {name}, paired by round: " + "  ".join(cols))
    shutil.rmtree(wd, ignore_errors=True)


if __name__ == "__main__":
    main()
