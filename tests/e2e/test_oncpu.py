#!/usr/bin/env python3
"""On-CPU samples (--cpu-hz): kind "cpu" samples against the demo's ground truth.

With --oncpu-tasks the demo runs two CPU-bound kinds that yield after every poll, heavy (three
units of work a poll) and light (one), and writes each second the CPU time their polls took,
from each thread's own CPU clock ("oncpu" lines, cumulative). Every clock tick on a worker is
a sample weighing one period, so a kind's estimate is its samples x the period.
"""
import os
import re
import subprocess
import time
import xml.etree.ElementTree as ET

from harness import (DEMO_FP, DEMO_NOFP, TOOL, Demo, perf, read_metadata, read_samples, run_all,
                     run_tool, test, tmpdir)

KINDS = ("heavy", "light")
WORKLOAD = ("--cpu-tasks", "0", "--timer-tasks", "2", "--channel-tasks", "0",
            "--blocking-tasks", "0", "--oncpu-tasks", "2")


def cpu_samples(out):
    return read_samples(out, kind="cpu")


def truth_between(demo, t0, t1):
    """Each kind's CPU ns inside polls between t0 and t1 (monotonic), interpolated between
    the demo's cumulative per-second lines."""
    lines = demo.lines("oncpu")

    def at(t, key):
        prev = None
        for line in lines:
            if line["mono_ns"] >= t:
                if prev is None:
                    return line[key]
                frac = (t - prev["mono_ns"]) / (line["mono_ns"] - prev["mono_ns"])
                return prev[key] + frac * (line[key] - prev[key])
            prev = line
        raise AssertionError(f"no oncpu line after {t}: the demo's truth ends too early")

    return {k: at(t1, k + "_ns") - at(t0, k + "_ns") for k in KINDS}


def kind_in(names):
    for k in KINDS:
        if any(f"oncpu_{k}_work" in n for n in names):
            return k
    return None


def estimates(samples):
    """Estimated CPU ns per kind by the samples' future, and the share of samples inside a
    kind's work function whose future names that kind."""
    est = dict.fromkeys(KINDS, 0)
    inside = right = 0
    for s in samples:
        fut = s["future"] or ""
        for k in KINDS:
            if f"oncpu_{k}_task" in fut:
                est[k] += s["weight_cpu_ns"]
        k = kind_in([f["name"] or "" for f in s["stack"]])
        if k:
            inside += 1
            right += f"oncpu_{k}_task" in fut
    assert inside >= 100, f"only {inside} samples inside the kinds' work"
    return est, right / inside


def check_vs_truth(est, truth, tol=0.20):
    for k in KINDS:
        err = est[k] / truth[k] - 1
        assert abs(err) <= tol, f"{k}: estimated {est[k] / 1e9:.3f} s, truth " \
            f"{truth[k] / 1e9:.3f} s ({err:+.0%})"
    return ", ".join(f"{k} {est[k] / 1e9:.2f}/{truth[k] / 1e9:.2f} s" for k in KINDS)


def perf_kind_ns(data, period):
    """perf's own estimate per kind: cpu-clock samples of the target whose callchain holds a
    kind's work function, times the fixed period."""
    text = perf("script", "-i", data, "-F", "ip,sym", "--no-inline")
    n = dict.fromkeys(KINDS, 0)
    for block in text.split("\n\n"):
        k = kind_in(block.splitlines())
        if k:
            n[k] += 1
    return {k: n[k] * period for k in KINDS}


RUN = {}


def fp_run():
    """One fp run at 499 Hz with perf record -e cpu-clock on the same target alongside."""
    if RUN:
        return RUN
    # D9_WORKERS: the same comparison with more workers than CPUs (bench/RESULTS.md).
    d = Demo(*WORKLOAD, binary=DEMO_FP, workers=int(os.environ.get("D9_WORKERS", 2)))
    out, pdir = tmpdir("d9out-oncpu-"), tmpdir("d9perf-oncpu-")
    data = os.path.join(pdir, "perf.data")
    try:
        time.sleep(1)
        period = 10**9 // 499
        rec = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-c", str(period),
                                "-g", "-p", str(d.pid), "-o", data, "--", "sleep", "8"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        rc, _, err = run_tool("--pid", d.pid, "--duration", 8, "--output", out,
                              "--cpu-hz", 499, timeout=60, windows=True)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        assert rec.wait(timeout=30) == 0, f"perf record: {rec.stderr.read()[-800:]}"
        time.sleep(1.2)  # the next cumulative line
        samples = cpu_samples(out)
        meta = read_metadata(out)
        t0 = min(s["timestamp_ns"] for s in samples)
        t1 = max(s["timestamp_ns"] for s in samples)
        RUN.update(out=out, samples=samples, meta=meta, truth=truth_between(d, t0, t1),
                   perf=perf_kind_ns(data, period), err=err)
    finally:
        d.stop()
    return RUN


@test
def fp_estimates_match_truth_and_perf():
    """fp: each kind's estimated CPU time within 20% of its thread-clock truth, samples inside
    a kind's work name its future (>= 95%), and perf record -e cpu-clock on the same run
    agrees (its kind estimates within 20% of the truth, the kinds' shares within 5 points)."""
    r = fp_run()
    est, named = estimates(r["samples"])
    got = check_vs_truth(est, r["truth"])
    assert named >= 0.95, f"only {named:.1%} of samples in a kind's work name its future"
    check_vs_truth(r["perf"], r["truth"])
    share = est["heavy"] / (est["heavy"] + est["light"])
    pshare = r["perf"]["heavy"] / (r["perf"]["heavy"] + r["perf"]["light"])
    assert abs(share - pshare) <= 0.05, f"heavy share {share:.3f}, perf {pshare:.3f}"
    cs = r["meta"]["cpu_samples"]
    assert cs["status"] == "sampling" and cs["hz"] == 499 and cs["clock_events"] >= 1, cs
    return f"{got}; named {named:.1%}; heavy share {share:.3f}, perf {pshare:.3f}"


@test
def views_carry_running_and_waiting():
    """pprof's cpu values, perf.data's task-cpu-ns, the time views and the report all sum to
    the samples' weight_cpu_ns; the time views root running and waiting by task type."""
    r = fp_run()
    out, total = r["out"], sum(s["weight_cpu_ns"] for s in r["samples"])
    hdr = perf("report", "-i", os.path.join(out, "perf.data"), "--stdio", "--sort", "comm",
               "-g", "none")
    m = re.search(r"of event 'task-cpu-ns'\n#\s*Event count \(approx\.\): (\d+)", hdr)
    assert m and int(m[1]) == total, hdr[:1500]
    running = {}
    with open(os.path.join(out, "stacks-time.folded")) as f:
        for line in f:
            stack, w = line.rsplit(" ", 1)
            frames = stack.split(";")
            assert frames[0] in ("running", "waiting"), frames[0]
            if frames[0] == "running":
                running[frames[1]] = running.get(frames[1], 0) + int(w)
    assert sum(running.values()) == total, (sum(running.values()), total)
    assert any("oncpu_heavy_task" in k and k.startswith("task: ") for k in running), running
    svg = ET.parse(os.path.join(out, "flamegraph-time.svg")).getroot()
    titles = [t.text for t in svg.iter("{http://www.w3.org/2000/svg}title")]
    assert any(t.startswith("running (") for t in titles), titles[:5]
    assert any(t.startswith("waiting (") for t in titles), titles[:5]
    rc, text, err = run_tool("report", out)
    assert rc == 0, err
    top = text.split("Top tasks by CPU", 1)[1].splitlines()[2]
    assert "oncpu_heavy_task" in top, top
    return f"{len(r['samples'])} cpu samples, {total / 1e9:.2f} CPU-s in perf.data, " \
        f"folded, svg and report"


@test
def dwarf_attribution():
    """dwarf (a build without frame pointers): the same estimates and attribution, the stacks
    unwound in user space from the copied registers and stack."""
    d = Demo(*WORKLOAD, binary=DEMO_NOFP, workers=2)
    out = tmpdir("d9out-oncpu-dw-")
    try:
        time.sleep(1)
        rc, _, err = run_tool("--pid", d.pid, "--duration", 6, "--output", out,
                              "--cpu-hz", 199, "--unwind", "dwarf", timeout=60, windows=True)
        assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        time.sleep(1.2)
        samples = cpu_samples(out)
        truth = truth_between(d, min(s["timestamp_ns"] for s in samples),
                              max(s["timestamp_ns"] for s in samples))
    finally:
        d.stop()
    assert read_metadata(out)["unwind"]["mode"] == "dwarf"
    est, named = estimates(samples)
    got = check_vs_truth(est, truth)
    assert named >= 0.95, f"only {named:.1%} of samples in a kind's work name its future"
    return f"{got}; named {named:.1%}"


@test
def clock_event_unavailable():
    """Without a clock event (perf_event_open refused) one line says the on-CPU view is
    unavailable and why, and the run goes on with park samples."""
    shim_dir = tmpdir("d9shim-")
    src, lib = os.path.join(shim_dir, "noperf.c"), os.path.join(shim_dir, "noperf.so")
    with open(src, "w") as f:
        f.write("#define _GNU_SOURCE\n#include <dlfcn.h>\n#include <errno.h>\n"
                "#include <stdarg.h>\n#include <sys/syscall.h>\n"
                "long syscall(long n, ...) {\n"
                "  static long (*real)(long, ...);\n  va_list ap; long a[6];\n"
                "  va_start(ap, n); for (int i = 0; i < 6; i++) a[i] = va_arg(ap, long);\n"
                "  va_end(ap);\n  if (n == SYS_perf_event_open) { errno = ENOENT; return -1; }\n"
                "  if (!real) real = (long (*)(long, ...))dlsym(RTLD_NEXT, \"syscall\");\n"
                "  return real(n, a[0], a[1], a[2], a[3], a[4], a[5]);\n}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", lib, src, "-ldl"], check=True)
    d = Demo(*WORKLOAD, binary=DEMO_FP, workers=2)
    out = tmpdir("d9out-oncpu-bad-")
    try:
        rc, _, err = run_tool("--pid", d.pid, "--duration", 2, "--output", out, "--cpu-hz", 49,
                              env=dict(os.environ, LD_PRELOAD=lib), timeout=60, windows=True)
    finally:
        d.stop()
    assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
    lines = [l for l in err.splitlines() if "on-CPU view is unavailable" in l]
    assert len(lines) == 1 and "perf_event_open" in lines[0], err[-1500:]
    assert read_metadata(out)["cpu_samples"]["status"] == "no_clock_event"
    assert not cpu_samples(out)
    return lines[0].split(": ", 1)[1]


@test
def default_rate_in_help():
    """--cpu-hz is documented with its default, and a bad value is one line and exit 2."""
    p = subprocess.run([TOOL, "--help"], capture_output=True, text=True)
    assert "--cpu-hz" in p.stdout and "default 19" in p.stdout, p.stdout[-2000:]
    p = subprocess.run([TOOL, "--pid", "1", "--cpu-hz", "fast"], capture_output=True, text=True)
    assert p.returncode == 2 and "invalid --cpu-hz 'fast'" in p.stderr, p.stderr
    return "default 19"


if __name__ == "__main__":
    run_all()
