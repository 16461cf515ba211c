#!/usr/bin/env python3
"""Cost per sample, end to end, of each --unwind mode: `tools/bench-unwind-cost.py [--binary
build/demo-plain] [--rounds 3] [--seconds 10] [--hz 400]`

One one-worker demo; dial9-bpf runs against it in rotation (fp, dwarf, ebpf) with the probes
always attached (--overhead-budget 100). Per sample written: the BPF side's capture time
(metadata counters.capture_ns: bpf_get_stack, the raw copy or the BPF walk, and the sample
write into the ring buffer) plus the loader's time turning records into written samples
(samples.loader_ns: ring-buffer records, userspace unwinding, symbolizing, inline names,
samples.jsonl). Root.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOOL = os.path.join(ROOT, "build", "dial9-bpf")
MODES = ("fp", "dwarf", "ebpf")


def run_tool(pid, mode, hz, seconds):
    out = tempfile.mkdtemp(prefix=f"d9cost-{mode}-")
    cmd = [TOOL, "--pid", str(pid), "-d", str(seconds), "-F", str(hz), "--unwind", mode,
           "--overhead-budget", "100", "--format", "jsonl", "-o", out, "-q"]
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode:
        sys.exit(f"dial9-bpf exited {p.returncode}: {p.stderr[-500:]}")
    with open(os.path.join(out, "samples.jsonl")) as f:
        frames = [len(json.loads(line)["stack"]) for line in f]
    with open(os.path.join(out, "metadata.json")) as f:
        meta = json.load(f)
    shutil.rmtree(out, ignore_errors=True)
    n = max(len(frames), 1)
    return (len(frames), sum(frames) / n, meta["counters"]["capture_ns"] / n / 1e3,
            meta["samples"]["loader_ns"] / n / 1e3)


def rng(v, fmt="{:.1f}"):
    lo, hi = fmt.format(min(v)), fmt.format(max(v))
    return lo if lo == hi else f"{lo}-{hi}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--binary", default=os.path.join(ROOT, "build", "demo-plain"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--hz", type=int, default=400)
    a = ap.parse_args()
    demo = subprocess.Popen([a.binary, "--workers", "1", "--duration", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    res = {m: [] for m in MODES}
    try:
        time.sleep(1)
        for _ in range(a.rounds):
            for m in MODES:
                res[m].append(run_tool(demo.pid, m, a.hz, a.seconds))
    finally:
        demo.kill()
        demo.wait()
    print(f"{os.path.basename(a.binary)}, 1 worker, {a.seconds} s at -F {a.hz}, {a.rounds} rounds "
          "(ranges over rounds)")
    print("| mode | samples | frames/sample | BPF capture µs | loader µs | end to end µs |")
    print("|---|---|---|---|---|---|")
    for m in MODES:
        r = res[m]
        print(f"| {m} | {rng([x[0] for x in r], '{:d}')} | {rng([x[1] for x in r])} | "
              f"{rng([x[2] for x in r])} | {rng([x[3] for x in r])} | "
              f"{rng([x[2] + x[3] for x in r])} |")


if __name__ == "__main__":
    main()
