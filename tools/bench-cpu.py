#!/usr/bin/env python3
"""What each profiler's own process costs, per sample: `tools/bench-cpu.py [--mode hot|mix]
[--hz 99] [--rounds 2] SECONDS...`

Throughput A/B runs (tools/bench-ab.py) resolve differences of ~0.5% at best on a noisy VM;
this measures the part of the cost that can be read exactly: the CPU time (user + sys, from
the kernel's rusage of the finished child) of dial9-bpf and of `perf record --call-graph dwarf`
and `-g`, each run for SECONDS against ONE demo, in rotation, at the same per-worker rate. Runs
of two lengths separate the fixed start and finish cost from the cost per second. For
dial9-bpf it also prints what it spends inside the target (probe hits x the hit's measured
cost, plus captures: metadata.json probe_cpu_s_est), which the process CPU does not include;
perf's sampling interrupts are measured separately, in the threads they sample
(tools/bench-perf-cost.py).
Root.

    tools/bench-cpu.py --rounds 2 5 25
"""
import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def child_cpu(cmd):
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    wall = time.monotonic() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        sys.exit(f"{cmd[0]} exited {p.returncode}: {p.stderr[-500:]}")
    return r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime, wall


def perf_samples(path):
    out = subprocess.run(["perf", "report", "-i", path, "--stats"], capture_output=True,
                         text=True).stdout
    for line in out.splitlines():
        # "SAMPLE events:  988" or, with other records present, "...  988  (92.5%)"
        if "SAMPLE events" in line:
            return int(line.split(":")[1].split()[0])
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", default="hot")
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("seconds", nargs="+", type=int)
    a = ap.parse_args()
    wd = tempfile.mkdtemp(prefix="bench-cpu-")
    demo = subprocess.Popen([os.path.join(ROOT, "build", "demo-fp"), "--workers", "2",
                             "--mode", a.mode, "--duration", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        time.sleep(3)
        pid = str(demo.pid)
        for _ in range(a.rounds):
            for secs in a.seconds:
                out = os.path.join(wd, "d9")
                shutil.rmtree(out, ignore_errors=True)
                cpu, wall = child_cpu([os.path.join(ROOT, "build", "dial9-bpf"), "--pid", pid,
                                       "-d", str(secs), "-o", out, "--quiet",
                                       "--per-worker-hz", str(a.hz)])
                with open(os.path.join(out, "metadata.json")) as f:
                    m = json.load(f)
                ovh = m["overhead"]
                rows.append(("dial9-bpf", secs, cpu, wall, m["samples"]["written"],
                             ovh["probe_cpu_s_est"], ovh["tool_cpu_s_while_sampling"]))
                for name, cg in (("perf dwarf", ["--call-graph", "dwarf"]), ("perf -g", ["-g"])):
                    data = os.path.join(wd, "perf.data")
                    cpu, wall = child_cpu(["perf", "record", "-q", "-F", str(a.hz), "-p", pid,
                                           "-o", data, *cg, "--", "sleep", str(secs)])
                    rows.append((name, secs, cpu, wall, perf_samples(data), None, None))
                for r in rows[-3:]:
                    extra = (f"  in target {r[5]:.4f} s, process while sampling {r[6]:.4f} s"
                             if r[5] is not None else "")
                    print(f"{r[0]:10s} {r[1]:3d} s: process CPU {r[2]:.3f} s, {r[4]} samples, "
                          f"{1e6 * r[2] / max(r[4], 1):.1f} us/sample{extra}", flush=True)
    finally:
        demo.kill()
        shutil.rmtree(wd, ignore_errors=True)
    if len(a.seconds) >= 2:
        lo, hi = min(a.seconds), max(a.seconds)
        print(f"\nper second of profiling (from {lo} s and {hi} s runs), and fixed per run:")
        for name in ("dial9-bpf", "perf dwarf", "perf -g"):
            def mean(secs, i):
                v = [r[i] for r in rows if r[0] == name and r[1] == secs]
                return sum(v) / len(v)
            slope = (mean(hi, 2) - mean(lo, 2)) / (hi - lo)
            fixed = mean(lo, 2) - slope * lo
            line = f"{name:10s} process {1e3 * slope:.2f} ms/s, fixed {fixed:.3f} s"
            if name == "dial9-bpf":
                line += f"; in target {1e3 * mean(hi, 5) / hi:.2f} ms/s"
            samples = mean(hi, 4) / hi
            print(line + f"; {samples:.0f} samples/s")


if __name__ == "__main__":
    main()
