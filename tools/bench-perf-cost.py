#!/usr/bin/env python3
"""perf record's cost inside the threads it samples, measured there: `tools/bench-perf-cost.py`.

build/gapmeter (tools/gapmeter.c) runs THREADS spinning threads under a deep stack and counts
the time taken from them without a context switch (interrupts). Segments of --seg seconds run
unprofiled, under `perf record -F HZ -g -p PID` and under `perf record -F HZ --call-graph dwarf
-p PID`, interleaved and rotated each round. Each perf segment is compared with the unprofiled
ones just before and after it. Printed: in-thread interrupt time per second (extra over the
unprofiled neighbours), extra interrupts per second, the samples perf wrote, and the cost per
sample; the switches to other tasks (perf's own process, among others) are printed apart, as
they are perf's process CPU, which tools/bench-cpu.py counts. Root.

This is a lower bound for a Tokio worker: a spinning thread is not switched out, so it does not
pay perf's per-thread event switching at every park and wake.

--tlb N prices a TLB-shootdown IPI instead (what each breakpoint dial9-bpf writes or removes
sends the target's other cores): segments of gapmeter alone alternate with gapmeter taking write
access to a page away and back N times a second (one or two shootdowns each), and the extra
in-thread time is divided by the extra shootdowns received, counted in /proc/interrupts.

    tools/bench-perf-cost.py --seg 10 --rounds 6
    tools/bench-perf-cost.py --tlb 2000 --seg 8 --rounds 5
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NS = 1_000_000_000


def mono():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


class Meter:
    """build/gapmeter, its per-second cumulative lines kept by whole second."""

    def __init__(self, binary, threads, shoot=0):
        self.proc = subprocess.Popen([binary, str(threads), "0", "1000", str(shoot)],
                                     stdout=subprocess.PIPE, text=True, bufsize=1)
        self.at = {}
        self.tlb = {}

    def read_until(self, sec):
        while sec not in self.at:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("gapmeter ended")
            rec = json.loads(line)
            self.at[rec["t"]] = rec
            self.tlb[rec["t"]] = tlb_shootdowns()
        return self.at[sec]

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def tlb_shootdowns():
    with open("/proc/interrupts") as f:
        for line in f:
            if line.split(":")[0].strip() == "TLB":
                return sum(int(x) for x in line.split()[1:] if x.isdigit())
    return 0


def tlb_price(a):
    """--tlb: gapmeter alone against gapmeter write-protecting a page a.tlb times a second."""
    res = {0: [], a.tlb: []}
    for r in range(a.rounds):
        for shoot in ((0, a.tlb) if r % 2 == 0 else (a.tlb, 0)):
            m = Meter(a.meter, a.threads, shoot)
            try:
                s0 = int(mono()) + 2  # past the threads' start
                x, y = m.read_until(s0), m.read_until(s0 + a.seg)
                d = delta(x, y, a.seg)
                d["tlb"] = (m.tlb[s0 + a.seg] - m.tlb[s0]) / a.seg
                res[shoot].append(d)
            finally:
                m.stop()
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    print(f"# tools/bench-perf-cost.py --tlb {a.tlb} --seg {a.seg} --rounds {a.rounds} "
          f"--threads {a.threads}\n")
    print("| round | extra shootdowns received/s | extra in-thread us/s | extra in-thread gaps/s "
          "| us per shootdown |")
    print("|---|---|---|---|---|")
    per = []
    for r, (b, s) in enumerate(zip(res[0], res[a.tlb])):
        dt, dn = s["tlb"] - b["tlb"], (s["irq_ns"] - b["irq_ns"]) / 1000
        per.append(dn / dt if dt > 0 else float("nan"))
        print(f"| {r + 1} | {dt:.0f} | {dn:.0f} | {s['irq_n'] - b['irq_n']:.0f} | {per[-1]:.2f} |")
    print(f"\nper shootdown received: median {statistics.median(per):.2f} us, "
          f"range {min(per):.2f}-{max(per):.2f}")


def delta(a, b, secs):
    keys = ("irq_n", "irq_ns", "cs_n", "cs_ns", "loops")
    d = {k: (b[k] - a[k]) / secs for k in keys}
    d["hist"] = [y - x for x, y in zip(a["hist"], b["hist"])]
    return d


def run_segment(meter, kind, seg, hz, wd, n):
    """One segment; the counts cover whole seconds in which perf was sampling throughout."""
    proc, samples = None, None
    if kind != "base":
        out = os.path.join(wd, f"{kind}-{n}.data")
        cmd = ["perf", "record", "-q", "-k", "CLOCK_MONOTONIC", "-F", str(hz), "-p",
               str(meter.proc.pid), "-o", out]
        cmd += ["-g"] if kind == "fp" else ["--call-graph", "dwarf"]
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                text=True)
        time.sleep(1.0)  # perf opens its events and starts sampling
    s0 = int(mono()) + 1
    a = meter.read_until(s0)
    b = meter.read_until(s0 + seg)
    if proc:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
        if proc.returncode not in (0, -signal.SIGINT) or not os.path.exists(out):
            sys.exit(f"bench-perf-cost: perf record failed ({proc.returncode}): "
                     f"{err.strip().splitlines()[-1] if err.strip() else 'no message'}")
        # Samples in the measured seconds, by their CLOCK_MONOTONIC times (-k).
        r = subprocess.run(["perf", "script", "-F", "time", "-i", out], capture_output=True,
                           text=True)
        times = [float(x) for x in re.findall(r"([0-9]+\.[0-9]+):", r.stdout)]
        samples = sum(1 for x in times if s0 <= x < s0 + seg)
        rec = {"bytes": os.path.getsize(out) / max(len(times), 1)}
        os.unlink(out)
    else:
        rec = {}
    rec.update(delta(a, b, seg), kind=kind, samples=samples)
    return rec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seg", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--hz", type=int, default=99)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--meter", default=os.path.join(ROOT, "build", "gapmeter"))
    ap.add_argument("--tlb", type=int, default=0,
                    help="price a TLB-shootdown IPI with N shootdowns a second instead")
    a = ap.parse_args()
    if a.seg < 1 or a.rounds < 1 or a.threads < 1 or a.hz < 1 or 0 < a.tlb < 10:
        ap.error("--seg, --rounds, --threads and --hz must be at least 1, --tlb 0 or at least 10")
    if os.geteuid():
        sys.exit("bench-perf-cost: needs root (perf record -p); run it with sudo")
    if not os.access(a.meter, os.X_OK):
        sys.exit(f"bench-perf-cost: {a.meter} is missing; build it with `make build/gapmeter`")
    if a.tlb:
        return tlb_price(a)
    with tempfile.TemporaryDirectory(prefix="perfcost-") as wd:
        segs = measure(a, wd)
    report(a, segs)


def measure(a, wd):
    """Unprofiled and perf segments in rotation, every perf segment between unprofiled ones."""
    meter = Meter(a.meter, a.threads)
    kinds = ["fp", "dwarf"]
    segs = []
    try:
        meter.read_until(int(mono()) + 2)  # past the threads' start
        n = 0
        segs.append(run_segment(meter, "base", a.seg, a.hz, wd, n))
        for r in range(a.rounds):
            order = kinds[r % 2:] + kinds[:r % 2]
            for k in order:
                n += 1
                segs.append(run_segment(meter, k, a.seg, a.hz, wd, n))
                segs.append(run_segment(meter, "base", a.seg, a.hz, wd, n))
            print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    finally:
        meter.stop()
    return segs


def report(a, segs):
    kinds = ["fp", "dwarf"]
    print(f"# tools/bench-perf-cost.py --seg {a.seg} --rounds {a.rounds} --hz {a.hz} "
          f"--threads {a.threads}")
    print("\n| segment | extra in-thread us/s | extra interrupts/s | samples/s | us per sample "
          "| switched out us/s | bytes/sample |")
    print("|---|---|---|---|---|---|---|")
    res = {k: [] for k in kinds}
    for i, s in enumerate(segs):
        if s["kind"] == "base":
            continue
        base = [segs[j] for j in (i - 1, i + 1) if 0 <= j < len(segs) and
                segs[j]["kind"] == "base"]
        b_ns = statistics.mean(x["irq_ns"] for x in base)
        b_n = statistics.mean(x["irq_n"] for x in base)
        b_cs = statistics.mean(x["cs_ns"] for x in base)
        extra = (s["irq_ns"] - b_ns) / 1000
        sps = s["samples"] / a.seg if s["samples"] else float("nan")
        per = extra / sps if sps == sps and sps > 0 else float("nan")
        res[s["kind"]].append(dict(extra=extra, n=s["irq_n"] - b_n, sps=sps, per=per,
                                   cs=(s["cs_ns"] - b_cs) / 1000,
                                   bps=s["bytes"]))
        print(f"| {s['kind']} | {extra:.0f} | {s['irq_n'] - b_n:.0f} | {sps:.0f} | {per:.2f} "
              f"| {(s['cs_ns'] - b_cs) / 1000:.0f} | {res[s['kind']][-1]['bps']:.0f} |")
    bases = [s for s in segs if s["kind"] == "base"]
    print(f"\nunprofiled: {statistics.mean(s['irq_n'] for s in bases):.0f} interrupts/s, "
          f"{statistics.mean(s['irq_ns'] for s in bases) / 1000:.0f} us/s in-thread "
          f"(sd {statistics.pstdev(s['irq_ns'] for s in bases) / 1000:.0f}), "
          f"{statistics.mean(s['cs_ns'] for s in bases) / 1000:.0f} us/s switched out")
    print("\n| perf record | extra in-thread us/s, mean +- se | us per sample | samples/s |")
    print("|---|---|---|---|")
    for k in kinds:
        xs = res[k]
        if not xs:
            continue
        se = statistics.stdev(x["extra"] for x in xs) / len(xs) ** 0.5 if len(xs) > 1 else 0
        print(f"| {'-g' if k == 'fp' else '--call-graph dwarf'} -F {a.hz} "
              f"| {statistics.mean(x['extra'] for x in xs):.0f} +- {se:.0f} "
              f"| {statistics.median(x['per'] for x in xs):.2f} "
              f"| {statistics.mean(x['sps'] for x in xs):.0f} |")
    for kind in ["base"] + kinds:
        hist = [0] * len(bases[0]["hist"])
        nseg = 0
        for s in segs:
            if s["kind"] == kind:
                hist = [h + x for h, x in zip(hist, s["hist"])]
                nseg += 1
        print(f"\nin-thread gaps per second, {kind}, by length in us: " +
              ", ".join(f"{2 ** b}{'+' if b == len(hist) - 1 else f'-{2 ** (b + 1)}'}: "
                        f"{h / nseg / a.seg:.1f}" for b, h in enumerate(hist) if h))


if __name__ == "__main__":
    main()
