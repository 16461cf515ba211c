#!/usr/bin/python3
# `make bench-overhead` needs Debian's python3-matplotlib for the plot
# (apt-get install -y python3-matplotlib; the make target installs it when missing).
"""Target overhead of dial9-bpf against perf record, on the bundled Tokio demo.

Needs root (dial9-bpf and perf attach to another process), build/dial9-bpf and build/demo-fp
(`make && make demo-bin`), perf, and for the plot Debian's python3-matplotlib
(`apt-get install -y python3-matplotlib`; `make bench-overhead` installs it when missing and runs
this script with /usr/bin/python3, the interpreter that package is for). Measuring uses the
standard library only; without matplotlib the plot is skipped.

Method. For each workload (the demo's ordinary mix, `--mode mix`, and its high poll rate
variant, `--mode hot`) ONE demo process runs for the whole benchmark, and configurations are
interleaved in it: baseline (nothing attached), X1, baseline, X2, baseline, ... so every
profiled segment has an unprofiled segment just before and just after it; machines are noisy,
and slow drift cancels out that way. A segment's figures come from the demo's own per-second
JSON lines (work units and task polls per CLOCK_MONOTONIC whole second), using only the whole
seconds in which the tool samples, minus the first one (attach, and recovery from the previous
segment's detach): for perf the `sleep` it runs for, for dial9-bpf the interval between
`sampling_started_at_ns` and `sampling_stopped_at_ns` of its metadata.json (it reads symbols
and calibrates before, and writes its outputs after). Those one-off costs are in the tool's CPU
and in a column of their own: the loss over the whole run, start and finish included. The target's CPU is read from /proc/PID/stat (utime + stime) at every
whole-second boundary, so CPU per poll covers exactly the seconds used: it is robust to other
load on the machine (which lowers polls/s, not the cost of a poll), while probe hits and
sampling interrupts, charged to the target, raise it. The tool's own CPU and peak RSS come from
GNU time around the tool process (wait4() when /usr/bin/time is missing: RSS unknown then).
The binaries are copied first, so a rebuild during the run does not disturb it. The demo and
every tool run at the same --nice (default -10, and the same nice for their scheduler
autogroups): other load on the machine then takes less of the target's CPU, while tool and
target compete with each other as they would on an idle machine.

Configurations: dial9-bpf with default settings (--overhead-budget 1: probes armed in random
windows) and with --overhead-budget 100 (probes on every poll, all the time), each at
--per-worker-hz 1, 10, 99, 1000;
`perf record -g` (frame pointers; the demo is built with them) at -F 10, 99, 999; and
`perf record --call-graph dwarf -F 99`. The main ones (dial9-bpf default and always armed at 10 Hz,
both perf at 99 Hz) run --rounds times, the rest of the sweep --sweep-rounds times.

Note on rates: dial9-bpf's --per-worker-hz is samples per second per Tokio worker (of task
resumes); perf's -F is samples per second of CPU time per thread (cpu-clock), so a busy worker
thread gets about F per second. The tables show what was delivered for both.
"""
import argparse
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOOL = os.path.join(ROOT, "build", "dial9-bpf")
DEMO = os.path.join(ROOT, "build", "demo-fp")
NS = 10**9
TICK = os.sysconf("SC_CLK_TCK")

_children = []  # every process started here, killed on the way out
KEEP = False  # --keep: leave the tools' outputs in the work directory


def mono_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


NICE = 0  # --nice: for the demo and every tool alike


def spawn(cmd, **kw):
    if NICE:
        cmd = ["nice", "-n", str(NICE), *cmd]
    p = subprocess.Popen(cmd, start_new_session=True, **kw)
    _children.append(p)
    if NICE:
        # A new session is a new scheduler autogroup (kernel.sched_autogroup_enabled), and
        # autogroups share the CPUs by their own nice, not their tasks': set it too.
        try:
            with open(f"/proc/{p.pid}/autogroup", "w") as f:
                f.write(str(NICE))
        except OSError:
            pass
    return p


def kill_all():
    for p in _children:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                continue
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


TIME = "/usr/bin/time"  # GNU time (Debian package "time"), for the tool's own peak RSS


def run_measured(cmd, stderr, timeout):
    """Runs cmd; returns (returncode, tool CPU seconds, max RSS KiB or None).

    Peak RSS through GNU time when installed: a process started from Python by vfork (what
    subprocess and posix_spawn do) inherits the Python process's peak RSS into its own
    ru_maxrss at exec, so wait4() here would report at least this script's RSS. CPU (user +
    system, the tool's and its waited-for children's) is right either way."""
    res = None
    if os.access(TIME, os.X_OK):
        res = tempfile.NamedTemporaryFile("r", prefix="d9time-", delete=False)
        cmd = [TIME, "-q", "-f", "%U %S %M", "-o", res.name, *cmd]
    p = spawn(cmd, stdout=subprocess.DEVNULL, stderr=stderr)
    deadline = time.time() + timeout
    while True:
        pid, status, ru = os.wait4(p.pid, os.WNOHANG)
        if pid == p.pid:
            rc = os.waitstatus_to_exitcode(status)
            break
        if time.time() > deadline:
            os.killpg(p.pid, signal.SIGKILL)
            pid, status, ru = os.wait4(p.pid, 0)
            rc = -9
            break
        time.sleep(0.02)
    p.returncode = rc
    cpu, rss = ru.ru_utime + ru.ru_stime, None
    if res:
        try:
            u, s_, m = res.read().split()[-3:]
            cpu, rss = float(u) + float(s_), int(m)
        except ValueError:
            pass
        res.close()
        os.unlink(res.name)
    return rc, cpu, rss


class Demo:
    """One long-running build/demo-fp; its JSON lines go to a file, its CPU is read per second."""

    def __init__(self, workdir, mode, workers):
        self.workers = workers
        self.mode = mode
        self.out_path = os.path.join(workdir, f"demo-{mode}.jsonl")
        self.out = open(self.out_path, "w")
        self.proc = spawn([DEMO, "--workers", str(workers), "--mode", mode, "--duration", "0"],
                          stdout=self.out, stderr=subprocess.DEVNULL)
        self.pid = self.proc.pid
        self.cpu_at = {}  # whole second s -> target CPU ns read just after s * 1e9
        self._stop = False
        self._thr = threading.Thread(target=self._cpu_loop, daemon=True)
        self._thr.start()
        deadline = time.time() + 10
        while not self._lines("start"):
            if time.time() > deadline or self.proc.poll() is not None:
                raise RuntimeError("demo did not start")
            time.sleep(0.05)

    def _cpu_ns(self):
        with open(f"/proc/{self.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * NS // TICK

    def _cpu_loop(self):
        while not self._stop:
            now = mono_ns()
            time.sleep((NS - now % NS) / 1e9)
            sec = mono_ns() // NS
            try:
                self.cpu_at[sec] = self._cpu_ns()
            except (OSError, ValueError):
                return

    def _lines(self, type_):
        res = []
        with open(self.out_path) as f:
            for line in f:
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if obj.get("type") == type_:
                    res.append(obj)
        return res

    def seconds(self):
        return {s["sec"]: s for s in self._lines("second")}

    def stop(self):
        self._stop = True
        if self.proc.poll() is None:
            os.killpg(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()


# ---------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------

def cfg(kind, hz, main):
    names = {"base": "baseline (unprofiled)", "d9": "dial9-bpf --overhead-budget 100 (always armed)",
             "d9w": "dial9-bpf default (--overhead-budget 1)",
             "d9w0": "dial9-bpf default without on-CPU samples (--cpu-hz 0)",
             "perf-fp": "perf record -g",
             "perf-dwarf": "perf record --call-graph dwarf"}
    rate = "" if kind == "base" else (f" -F {hz}" if kind.startswith("perf")
                                      else f" --per-worker-hz {hz}")
    return {"kind": kind, "hz": hz, "main": main, "name": names[kind] + rate,
            "key": f"{kind}@{hz}"}


def configurations(d9_hz, perf_hz):
    main = [cfg("d9", 10, True), cfg("d9w", 10, True), cfg("d9w0", 10, True),
            cfg("perf-fp", 99, True), cfg("perf-dwarf", 99, True)]
    sweep = [cfg("d9", h, False) for h in d9_hz if h != 10]
    sweep += [cfg("d9w", h, False) for h in d9_hz if h != 10]
    sweep += [cfg("perf-fp", h, False) for h in perf_hz if h != 99]
    return main, sweep


def schedule(main, sweep, rounds, sweep_rounds):
    """Profiled segments in run order; a baseline goes before, between and after them."""
    sweep_all = [c for _ in range(sweep_rounds) for c in sweep]
    order = []
    for r in range(rounds):
        k = r % len(main)
        order += main[k:] + main[:k]  # rotate so no configuration always follows another
        order += sweep_all[r::rounds]
    return order


def run_segment(demo, c, seg_s, workdir, idx):
    """Runs one configuration for about seg_s seconds; returns the segment's raw record."""
    rec = {"key": c["key"], "kind": c["kind"], "hz": c["hz"], "idx": idx}
    if c["kind"] == "base":
        t0 = mono_ns()
        time.sleep(seg_s)
        rec.update(t0=t0, t1=mono_ns())
        return rec
    out = os.path.join(workdir, f"{demo.mode}-seg{idx:03d}-{c['key']}")
    errf = open(out + ".stderr", "w")
    if c["kind"] in ("d9", "d9w", "d9w0"):
        os.makedirs(out)
        cmd = [TOOL, "--pid", str(demo.pid), "--duration", str(seg_s), "--output", out,
               "--quiet", "--per-worker-hz", str(c["hz"])]
        if c["kind"] == "d9":
            cmd += ["--overhead-budget", "100"]  # d9w: the defaults
        if c["kind"] == "d9w0":
            cmd += ["--cpu-hz", "0"]
    else:
        cmd = ["perf", "record", "-F", str(c["hz"]), "-p", str(demo.pid), "-o", out + ".data"]
        cmd += ["-g"] if c["kind"] == "perf-fp" else ["--call-graph", "dwarf"]
        cmd += ["--", "sleep", str(seg_s)]
    t0 = mono_ns()
    rc, cpu_s, rss = run_measured(cmd, errf, seg_s + 120)
    t1 = mono_ns()
    errf.close()
    # The whole run, start-up and finishing the outputs included, for the "incl. start and
    # finish" column; the main figures cover the seconds in which the tool samples.
    rec.update(t0_all=t0, t1_all=t1)
    if c["kind"].startswith("perf"):
        # perf's events stop when `sleep` ends; what follows is perf writing build ids.
        t1 = min(t1, t0 + int((seg_s + 0.5) * NS))
    elif rc == 0:
        # dial9-bpf reads symbols and calibrates before it samples, and symbolizes and
        # writes its outputs after: one-off costs, in the tool's CPU and the other column.
        try:
            with open(os.path.join(out, "metadata.json")) as f:
                meta = json.load(f)
            t0 = max(t0, meta["sampling_started_at_ns"])
            t1 = min(t1, meta["sampling_stopped_at_ns"])
        except (OSError, ValueError, KeyError):
            pass
    rec.update(t0=t0, t1=t1, rc=rc, tool_cpu_s=cpu_s, tool_rss_kb=rss, out=out,
               wall_s=(mono_ns() - rec["t0_all"]) / 1e9)
    if rc != 0:
        with open(out + ".stderr") as f:
            rec["error"] = f.read()[-500:]
    return rec


def tool_outputs(rec, seg_s, workers):
    """Samples delivered and bytes per sample, from the tool's own outputs."""
    if rec.get("rc") != 0:
        return
    if rec["kind"] in ("d9", "d9w", "d9w0"):
        with open(os.path.join(rec["out"], "metadata.json")) as f:
            meta = json.load(f)
        start = meta["sampling_started_at_ns"] // NS
        stop = meta["sampling_stopped_at_ns"] // NS
        # Pooled over (worker, epoch) pairs: workers found late or handed off (block_in_place)
        # have few complete epochs.
        eps = [e for w in meta["workers"] for e in w["epochs"]
               if e["complete"] and not e["calibrating"] and start < e["epoch"] < stop]
        capped = sum(1 for e in eps if e["capped"])
        sj = os.path.join(rec["out"], "samples.jsonl")
        with open(sj) as f:
            nlines = sum(1 for line in f if line.strip())
        written = meta["samples"]["written"]
        ovh = meta.get("overhead", {})
        rec.update(
            samples=written, samples_jsonl=nlines,
            per_worker_sel=(sum(e["selected"] for e in eps) / len(eps)) if eps else None,
            worker_epochs=len(eps),
            nworkers_seen=len(meta["workers"]), capped_epochs=capped,
            rb_drops=meta["counters"].get("ring_buffer_drops", 0),
            bytes_perf=os.path.getsize(os.path.join(rec["out"], "perf.data")),
            # With the stack table (absent in the inline layout) the samples name.
            bytes_jsonl=sum(os.path.getsize(p) for p in (sj, os.path.join(rec["out"],
                                                                          "stacks.jsonl"))
                            if os.path.exists(p)),
            armed_fraction=ovh.get("armed_fraction"),
            est_overhead_pct=ovh.get("est_overhead_pct"))
    else:
        data = rec["out"] + ".data"
        r = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid"],
                           capture_output=True, text=True)
        per_tid, total = {}, 0
        for line in r.stdout.splitlines():
            parts = line.split()
            if not parts:
                continue
            total += 1
            if parts[0].startswith("tokio-runtime-w"):
                per_tid[parts[-1]] = per_tid.get(parts[-1], 0) + 1
        rec.update(samples=total, samples_worker_threads=sum(per_tid.values()),
                   worker_threads=len(per_tid),
                   per_worker_sel=sum(per_tid.values()) / workers / seg_s,
                   bytes_perf=os.path.getsize(data))
        if not KEEP:
            os.unlink(data)  # dwarf data is big; its size is recorded


def segment_figures(demo, rec):
    """Whole seconds inside [t0, t1], minus the first: work/s, polls/s, CPU ns per poll; and
    work/s over the whole run, start and finish included (t0_all, t1_all)."""
    secs = demo.seconds()
    if "t0_all" in rec:
        first = -(-rec["t0_all"] // NS)
        use = [s for s in range(first + 1, rec["t1_all"] // NS) if s in secs]
        if use:
            rec["work_s_all"] = sum(secs[s]["work"] for s in use) / len(use)
    first = -(-rec["t0"] // NS)
    last = rec["t1"] // NS - 1  # second `last` ends at or before t1
    use = [s for s in range(first + 1, last + 1) if s in secs]
    rec["secs"] = use
    if not use:
        return
    polls = [sum(secs[s]["polls"].values()) for s in use]
    work = [secs[s]["work"] for s in use]
    rec["work_s"] = sum(work) / len(use)
    rec["polls_s"] = sum(polls) / len(use)
    c0, c1 = demo.cpu_at.get(use[0]), demo.cpu_at.get(use[-1] + 1)
    if c0 is not None and c1 is not None and sum(polls):
        rec["cpu_ns_poll"] = (c1 - c0) / sum(polls)
        rec["cpu_util"] = (c1 - c0) / (len(use) * NS)  # cores used by the target


def run_workload(mode, args, workdir, log):
    main, sweep = configurations(args.d9_hz, args.perf_hz)
    if args.only:
        keep = set(args.only.split(","))
        main = [c for c in main if c["key"] in keep]
        sweep = [c for c in sweep if c["key"] in keep]
    order = schedule(main, sweep, args.rounds, args.sweep_rounds)
    base = cfg("base", 0, True)
    demo = Demo(workdir, mode, args.workers)
    segs = []
    try:
        time.sleep(args.warmup)
        plan = [base]
        for c in order:
            plan += [c, base]
        for i, c in enumerate(plan):
            rec = run_segment(demo, c, args.seg, workdir, i)
            segs.append(rec)
            log(f"  [{mode} {i + 1}/{len(plan)}] {c['name']}"
                + (f" rc={rec['rc']}: {rec.get('error', '').strip()}"
                   if rec.get("rc") not in (None, 0) else ""))
        time.sleep(1.2)  # the last second's line
        for rec in segs:
            segment_figures(demo, rec)
            try:
                tool_outputs(rec, args.seg, worker_threads(args.workers))
            except (OSError, ValueError, KeyError) as e:
                rec["rc"], rec["error"] = -1, f"reading the tool's outputs: {e!r}"
    finally:
        demo.stop()
    return {"mode": mode, "segments": segs, "configs": main + sweep}


# ---------------------------------------------------------------------------------------------
# Analysis
# ---------------------------------------------------------------------------------------------

def mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


def stdev(v):
    v = [x for x in v if x is not None]
    if len(v) < 2:
        return None
    m = mean(v)
    return (sum((x - m) ** 2 for x in v) / (len(v) - 1)) ** 0.5


def ratios(segs):
    """Each profiled segment against the mean of the baselines just before and after it."""
    for i, r in enumerate(segs):
        if r["kind"] == "base" or "work_s" not in r:
            continue
        nb = [segs[j] for j in (i - 1, i + 1)
              if 0 <= j < len(segs) and segs[j]["kind"] == "base" and "work_s" in segs[j]]
        if not nb:
            continue
        for f in ("work_s", "polls_s", "cpu_ns_poll", "work_s_all"):
            b = mean([x.get(f if f != "work_s_all" else "work_s") for x in nb])
            if b and r.get(f) is not None:
                r[f + "_ratio"] = r[f] / b
    # Noise: each baseline against the baselines two segments either side of it.
    bases = [r for r in segs if r["kind"] == "base" and "work_s" in r]
    noise = {"work_s": [], "cpu_ns_poll": []}
    for i in range(1, len(bases) - 1):
        for f, v in noise.items():
            nb = mean([bases[i - 1].get(f), bases[i + 1].get(f)])
            if nb and bases[i].get(f) is not None:
                v.append(bases[i][f] / nb)
    return bases, noise


def pct(x):
    return None if x is None else 100 * x


def per_sample(segs, field):
    n = sum(r.get("samples", 0) for r in segs)
    return sum(r[field] for r in segs) / n if n else None


def worker_threads(workers):
    """Threads that run tasks: --workers 0 is a current_thread runtime, one thread."""
    return max(workers, 1)


def summarize(res, workers):
    segs = res["segments"]
    bases, noise = ratios(segs)
    summ = {"mode": res["mode"],
            "base_work_s": mean([b["work_s"] for b in bases]),
            "base_polls_s": mean([b["polls_s"] for b in bases]),
            "base_polls_s_worker": mean([b["polls_s"] for b in bases]) / workers,
            "base_cpu_ns_poll": mean([b.get("cpu_ns_poll") for b in bases]),
            "base_cpu_util": mean([b.get("cpu_util") for b in bases]),
            "noise_sd_pct": pct(stdev(noise["work_s"])),
            "cpu_noise_sd_pct": pct(stdev(noise["cpu_ns_poll"])),
            "rows": []}
    for c in res["configs"]:
        rs = [r for r in segs if r["key"] == c["key"]]
        ok = [r for r in rs if r.get("rc") == 0 and "work_s_ratio" in r]
        row = {"key": c["key"], "kind": c["kind"], "hz": c["hz"], "name": c["name"],
               "main": c["main"], "n": len(ok), "failed": len(rs) - len(ok)}
        if ok:
            wr = [r["work_s_ratio"] for r in ok]
            row.update(
                loss_pct=100 * (1 - mean(wr)),
                loss_min=100 * (1 - max(wr)), loss_max=100 * (1 - min(wr)),
                polls_loss_pct=100 * (1 - mean([r.get("polls_s_ratio") for r in ok])),
                loss_all_pct=pct(1 - mean([r.get("work_s_all_ratio") for r in ok])
                                 if mean([r.get("work_s_all_ratio") for r in ok]) else None),
                cpu_poll_ratio=mean([r.get("cpu_ns_poll_ratio") for r in ok]),
                cpu_min=min(r.get("cpu_ns_poll_ratio", 1) for r in ok),
                cpu_max=max(r.get("cpu_ns_poll_ratio", 1) for r in ok),
                polls_s_worker=mean([r["polls_s"] for r in ok]) / workers,
                tool_cpu_pct=100 * mean([r["tool_cpu_s"] / r["wall_s"] for r in ok]),
                tool_cpu_s=mean([r["tool_cpu_s"] for r in ok]),
                tool_rss_mib=max((r["tool_rss_kb"] or 0) for r in ok) / 1024 or None,
                per_worker_s=mean([r.get("per_worker_sel") for r in ok]),
                samples=mean([r.get("samples") for r in ok]),
                bytes_perf=per_sample(ok, "bytes_perf"))
            row["delivered_pct"] = (None if row["per_worker_s"] is None
                                    else 100 * row["per_worker_s"] / c["hz"])
            if c["kind"] in ("d9", "d9w", "d9w0"):
                row["bytes_jsonl"] = per_sample(ok, "bytes_jsonl")
                row["capped_epochs"] = sum(r["capped_epochs"] for r in ok)
                row["rb_drops"] = sum(r["rb_drops"] for r in ok)
                row["armed_fraction"] = mean([r.get("armed_fraction") for r in ok])
        summ["rows"].append(row)
    return summ


def fmt(v, spec, dash="-"):
    return dash if v is None else format(v, spec)


def markdown(summ, args):
    m = summ["mode"]
    lines = [
        f"### `--mode {m}`",
        "",
        f"Baseline (unprofiled): **{fmt(summ['base_polls_s_worker'], ',.0f')} polls/s per "
        f"worker** ({args.workers} workers: {fmt(summ['base_polls_s'], ',.0f')} polls/s and "
        f"{fmt(summ['base_work_s'], ',.0f')} work units/s in all), target CPU "
        f"{fmt(summ['base_cpu_util'], '.2f')} cores, {fmt(summ['base_cpu_ns_poll'], ',.0f')} ns "
        f"per poll. Noise, as the sd of each baseline segment against the baselines either side "
        f"of it: work/s {fmt(summ['noise_sd_pct'], '.1f')}%, CPU per poll "
        f"{fmt(summ['cpu_noise_sd_pct'], '.1f')}%.",
        "",
        "| configuration | segs | work/s loss % (min..max) | polls/s loss % "
        "| loss incl. start and finish % "
        "| CPU/poll x (min..max) | delivered /worker/s (% of requested) | tool CPU % "
        "| tool peak RSS MiB | B/sample perf.data | B/sample jsonl |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in sorted(summ["rows"], key=lambda r: (not r["main"], r["kind"], r["hz"])):
        if not r["n"]:
            lines.append(f"| {r['name']} | 0 ({r['failed']} failed) | | | | | | | | | |")
            continue
        rng = f" ({r['loss_min']:.1f}..{r['loss_max']:.1f})" if r["n"] > 1 else ""
        crng = f" ({r['cpu_min']:.2f}..{r['cpu_max']:.2f})" if r["n"] > 1 else ""
        name = f"**{r['name']}**" if r["main"] else r["name"]
        dpct = "" if r["delivered_pct"] is None else f" ({r['delivered_pct']:.0f}%)"
        lines.append(
            f"| {name} | {r['n']} | {r['loss_pct']:.1f}{rng} | {r['polls_loss_pct']:.1f} "
            f"| {fmt(r.get('loss_all_pct'), '.1f')} "
            f"| {fmt(r['cpu_poll_ratio'], '.2f')}{crng} "
            f"| {fmt(r['per_worker_s'], '.1f')}{dpct} "
            f"| {r['tool_cpu_pct']:.1f} | {fmt(r['tool_rss_mib'], '.1f')} "
            f"| {fmt(r['bytes_perf'], ',.0f')} | {fmt(r.get('bytes_jsonl'), ',.0f')} |")
    return "\n".join(lines)


def plot(summs, path, args):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing (apt-get install -y python3-matplotlib): no plot",
              file=sys.stderr)
        return False
    n = len(summs)
    fig, axes = plt.subplots(2, n, figsize=(6.4 * n, 9.0), squeeze=False)
    style = {"d9": ("dial9-bpf --overhead-budget 100 (always armed): x = --per-worker-hz",
                    "tab:blue", "o", "-"),
             "d9w": ("dial9-bpf default (--overhead-budget 1, windows): x = --per-worker-hz",
                     "tab:green", "s", "-"),
             "d9w0": ("dial9-bpf default, --cpu-hz 0: x = --per-worker-hz",
                      "tab:olive", "v", ""),
             "perf-fp": ("perf record -g (frame pointers): x = -F, per thread on CPU",
                         "tab:red", "^", "--"),
             "perf-dwarf": ("perf record --call-graph dwarf: x = -F, per thread on CPU",
                            "tab:purple", "D", "")}
    panels = [("loss_pct", "loss_min", "loss_max", "noise_sd_pct",
               "throughput loss, % of work/s\nvs the adjacent unprofiled segments"),
              ("cpu_pct", "cpu_lo", "cpu_hi", "cpu_noise_sd_pct",
               "target CPU per poll, % above\nthe adjacent unprofiled segments")]
    for s in summs:
        for r in s["rows"]:
            if r["n"] and r["cpu_poll_ratio"] is not None:
                r["cpu_pct"] = 100 * (r["cpu_poll_ratio"] - 1)
                r["cpu_lo"] = 100 * (r["cpu_min"] - 1)
                r["cpu_hi"] = 100 * (r["cpu_max"] - 1)
    handles = {}
    for col, s in enumerate(summs):
        for row, (f, lo, hi, noise, ylabel) in enumerate(panels):
            ax = axes[row][col]
            for kind, (label, color, marker, ls) in style.items():
                rows = sorted((r for r in s["rows"]
                               if r["kind"] == kind and r["n"] and r.get(f) is not None),
                              key=lambda r: r["hz"])
                if not rows:
                    continue
                x = [r["hz"] for r in rows]
                y = [r[f] for r in rows]
                yerr = [[r[f] - r[lo] for r in rows], [r[hi] - r[f] for r in rows]]
                h = ax.errorbar(x, y, yerr=yerr, color=color, marker=marker,
                                linestyle=ls or "none", capsize=3, markersize=6)
                handles[label] = h
            if s[noise] is not None:
                h = ax.axhspan(-2 * s[noise], 2 * s[noise], color="grey", alpha=0.15)
                handles["unprofiled segments' noise (±2 sd)"] = h
            if f == "loss_pct":
                handles["1% target"] = ax.axhline(1.0, color="black", linewidth=0.9,
                                                  linestyle=":")
            ax.axhline(0.0, color="grey", linewidth=0.6)
            # Scale to the measurements; a wide noise band just fills the panel.
            pts = [v for r in s["rows"] if r.get(f) is not None
                   for v in (r[lo], r[hi], r[f])]
            if pts:
                ax.set_ylim(min(-3.0, min(pts) - 3), max(5.0, max(pts) * 1.08 + 2))
            ax.set_xscale("log")
            ax.set_ylabel(ylabel)
            ax.set_xlabel("requested samples/s per worker (log)")
            ax.grid(True, which="both", alpha=0.3)
            if row == 0:
                ax.set_title(f"demo --mode {s['mode']}: {s['base_polls_s_worker']:,.0f} "
                             f"polls/s per worker unprofiled", fontsize=10)
    fig.legend(list(handles.values()), list(handles.keys()), loc="lower center",
               ncol=2 if n > 1 else 1,
               fontsize=8.5, frameon=False)
    fig.suptitle(f"Target overhead vs sampling rate: {os.cpu_count()} CPUs, kernel "
                 f"{platform.release()}\n{args.seg} s segments interleaved with unprofiled "
                 f"ones; bars = min..max over rounds", fontsize=10)
    fig.tight_layout(rect=(0, 0.08 if n > 1 else 0.14, 1, 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main():
    global KEEP, TOOL, DEMO, NICE
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", default="hot,mix", help="demo workloads (default hot,mix)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seg", type=int, default=6, help="seconds per segment (default 6)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="rounds of the main configurations (default 3)")
    ap.add_argument("--sweep-rounds", type=int, default=1,
                    help="rounds of the other sweep points (default 1)")
    ap.add_argument("--warmup", type=float, default=3.0)
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness of the demo and of every tool alike (default -10): keeps "
                    "other load on the machine from dominating throughput, while the tools "
                    "compete with the target as on an idle machine; 0 = unchanged")
    ap.add_argument("--d9-hz", default="1,10,99,1000", help="dial9-bpf --per-worker-hz sweep")
    ap.add_argument("--perf-hz", default="10,99,999", help="perf record -g -F sweep")
    ap.add_argument("--tool", default=TOOL, help="dial9-bpf binary (default build/dial9-bpf)")
    ap.add_argument("--demo", default=DEMO, help="demo binary (default build/demo-fp)")
    ap.add_argument("--plot", default=os.path.join(ROOT, "bench", "overhead-vs-hz.png"))
    ap.add_argument("--json", default=os.path.join(tempfile.gettempdir(), "bench-overhead.json"),
                    help="raw segments and summaries, written after each workload "
                    "(default %(default)s)")
    ap.add_argument("--reanalyze", metavar="JSON",
                    help="no measuring: tables and plot from a previous run's --json")
    ap.add_argument("--md", default=None, help="write the markdown tables here too")
    ap.add_argument("--keep", action="store_true", help="keep the tools' output directories")
    ap.add_argument("--only", default=None, metavar="KEYS",
                    help="run only these configurations, e.g. d9w@10,perf-dwarf@99 (kinds: d9 = "
                    "always armed, d9w = default, perf-fp, perf-dwarf)")
    args = ap.parse_args()
    if args.reanalyze:
        with open(args.reanalyze) as f:
            saved = json.load(f)
        for k in ("workers", "seg", "rounds", "sweep_rounds"):
            setattr(args, k, saved["args"][k])
        report(saved["results"], saved["head"], args)
        return
    args.d9_hz = [int(x) for x in args.d9_hz.split(",")]
    args.perf_hz = [int(x) for x in args.perf_hz.split(",")]
    KEEP = args.keep
    NICE = args.nice
    TOOL, DEMO = os.path.abspath(args.tool), os.path.abspath(args.demo)
    if 10 not in args.d9_hz or 99 not in args.perf_hz:
        ap.error("the sweeps must include the main points (--d9-hz 10, --perf-hz 99)")
    if os.geteuid() != 0:
        sys.exit("bench-overhead: run as root (dial9-bpf and perf attach to the demo)")
    for path in (TOOL, DEMO):
        if not os.access(path, os.X_OK):
            sys.exit(f"bench-overhead: {path} missing: run `make && make demo-bin`")
    if not shutil.which("perf"):
        sys.exit("bench-overhead: perf missing (apt-get install linux-perf)")

    def handler(signum, _frame):
        kill_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)

    m_all, s_all = configurations(args.d9_hz, args.perf_hz)
    if args.only:
        keep = set(args.only.split(","))
        m_all = [c for c in m_all if c["key"] in keep]
        s_all = [c for c in s_all if c["key"] in keep]
    main_n = len(m_all) * args.rounds
    sweep_n = len(s_all) * args.sweep_rounds
    modes = args.modes.split(",")
    est = len(modes) * ((main_n + sweep_n) * (2 * args.seg + 0.8) + args.seg + args.warmup + 2)
    workdir = tempfile.mkdtemp(prefix="d9-bench-overhead-")
    commit = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty"],
                            capture_output=True, text=True).stdout.strip() or "unknown"
    build = (f"commit {commit}" if TOOL == os.path.join(ROOT, "build", "dial9-bpf")
             else f"dial9-bpf {TOOL} (tree at commit {commit})")
    # Private copies: a rebuild of build/ during the run must not change or remove them.
    for name in ("TOOL", "DEMO"):
        src = globals()[name]
        dst = os.path.join(workdir, os.path.basename(src))
        shutil.copy2(src, dst)
        globals()[name] = dst
    t_start = time.time()
    load0 = os.getloadavg()[1]

    def log(msg):
        print(f"{time.time() - t_start:6.0f}s {msg}", file=sys.stderr, flush=True)

    log(f"{len(modes)} workloads x {main_n + sweep_n} profiled segments of {args.seg} s, "
        f"each between baselines: about {est / 60:.0f} min; work dir {workdir}")
    results = []
    try:
        for mode in modes:
            results.append(run_workload(mode, args, workdir, log))
            head = (f"Build: {build}; machine: {os.cpu_count()} CPUs, kernel "
                    f"{platform.release()}; {args.seg} s segments, first whole second of each "
                    f"dropped; main configurations x{args.rounds}, rest of the sweep "
                    f"x{args.sweep_rounds}; total {(time.time() - t_start) / 60:.1f} min; "
                    f"5-min load average {load0:.1f} at the start, {os.getloadavg()[1]:.1f} "
                    f"at the end.")
            with open(args.json, "w") as f:  # raw first: a failing analysis loses nothing
                json.dump({"args": vars(args), "head": head, "results": results}, f, indent=1)
    finally:
        kill_all()
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
    report(results, head, args)
    print(f"raw results: {args.json}", file=sys.stderr)
    if args.keep:
        print(f"tool outputs kept in {workdir}", file=sys.stderr)


def report(results, head, args):
    summs = [summarize(res, worker_threads(args.workers)) for res in results]
    md = head + "\n\n" + "\n\n".join(markdown(s, args) for s in summs) + "\n"
    print(md)
    if args.md:
        with open(args.md, "w") as f:
            f.write(md)
    if args.plot and plot(summs, args.plot, args):
        print(f"plot: {args.plot}", file=sys.stderr)


if __name__ == "__main__":
    try:
        main()
    finally:
        kill_all()
