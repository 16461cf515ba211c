"""Small end-to-end test harness: real demo processes, the real tool, results as lines.

Each test is a function registered with @test; it raises AssertionError (or anything) to fail.
run_all() prints one PASS/FAIL line per test and writes "passed failed" to --summary-file.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# D9_TOOL runs another build (e.g. an earlier commit's) through the same checks.
TOOL = os.environ.get("D9_TOOL") or os.path.join(ROOT, "build", "dial9-bpf")
DEMO_FP = os.path.join(ROOT, "build", "demo-fp")
DEMO_NOFP = os.path.join(ROOT, "build", "demo-nofp")
# A plain `cargo build --release` (no debug info, legacy mangling, no frame pointers), and that
# build stripped with its symbols in DEMO_PLAIN_STRIPPED + ".debug" (Makefile, demo-bin).
DEMO_PLAIN = os.path.join(ROOT, "build", "demo-plain")
DEMO_PLAIN_STRIPPED = os.path.join(ROOT, "build", "demo-plain-stripped")

_tests = []

# The demo's async fns, as stack frames name them.
DEMO_FNS = ("cpu_kind_task", "timer_kind_task", "channel_kind_producer",
            "channel_kind_consumer", "blocking_kind_task", "channel_kind_notifier",
            "channel_kind_notified")

_tmpdirs = []
_perf_home = []


def tmpdir(prefix):
    """A temporary directory that remove_tmpdirs() deletes (unless D9_KEEP_OUTPUT is set)."""
    d = tempfile.mkdtemp(prefix=prefix)
    _tmpdirs.append(d)
    return d


def remove_tmpdirs():
    if not os.environ.get("D9_KEEP_OUTPUT"):
        for d in _tmpdirs:
            shutil.rmtree(d, ignore_errors=True)
        _tmpdirs.clear()


def perf(*args, home=None, timeout=120):
    """perf with its own HOME: no ~/.debug build-id cache or ~/.perfconfig of the machine."""
    if home is None:
        if not _perf_home:
            _perf_home.append(tmpdir("d9perf-home-"))
        home = _perf_home[0]
    env = dict(os.environ, HOME=home)
    env.pop("PERF_BUILDID_DIR", None)
    p = subprocess.run(["perf", *args], capture_output=True, text=True, env=env,
                       timeout=timeout)
    assert p.returncode == 0, f"perf {' '.join(args)} exited {p.returncode}: {p.stderr[-800:]}"
    return p.stdout


def test(fn):
    _tests.append(fn)
    return fn


class Demo:
    """A running dial9-demo whose JSON-lines stdout is collected in a file."""

    def __init__(self, *args, binary=DEMO_FP, workers=2, mode="mix", env=None, wrap=None):
        self.dir = tmpdir("d9demo-")
        self.out_path = os.path.join(self.dir, "demo.jsonl")
        self.out = open(self.out_path, "w")
        cmd = [binary, "--workers", str(workers), "--mode", mode, "--duration", "0", *args]
        if wrap:
            cmd = wrap + cmd
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.DEVNULL,
                                     env=env, start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.time() + 10
        while time.time() < deadline:
            if self.lines(type_="start"):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("demo did not start")

    def lines(self, type_=None):
        res = []
        with open(self.out_path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue  # a line still being written
                if type_ is None or obj.get("type") == type_:
                    res.append(obj)
        return res

    def seconds(self):
        return {s["sec"]: s for s in self.lines("second")}

    def wait_seconds(self, n):
        """Waits until n more whole seconds have been reported."""
        start = len(self.lines("second"))
        deadline = time.time() + n + 5
        while len(self.lines("second")) < start + n:
            if time.time() > deadline:
                raise AssertionError("demo stopped reporting seconds")
            time.sleep(0.05)

    def polls_per_sec(self, secs):
        """Mean total polls per second over the given whole seconds."""
        s = self.seconds()
        vals = [sum(s[k]["polls"].values()) for k in secs if k in s]
        assert vals, "no demo seconds in range"
        return sum(vals) / len(vals)

    def cpu_ns_per_poll(self, nsecs):
        """Target CPU time per task poll over the next nsecs whole seconds.

        CPU per poll, not polls per second: another process competing for the cores lowers
        the poll rate but not what each poll costs, while a probe left in the target raises
        the cost of every poll."""
        tick = os.sysconf("SC_CLK_TCK")

        def cpu_ns():
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) * 1e9 / tick

        def at_second_boundary():
            now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            time.sleep((10**9 - now % 10**9) / 1e9)
            return time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 10**9

        s0 = at_second_boundary()
        c0 = cpu_ns()
        time.sleep(nsecs - 0.05)
        at_second_boundary()
        c1 = cpu_ns()
        self.wait_seconds(1)
        secs = self.seconds()
        polls = sum(sum(secs[s]["polls"].values()) for s in range(s0, s0 + nsecs) if s in secs)
        assert polls > 0, "no polls reported"
        return (c1 - c0) / polls

    def last_secs(self, n):
        return sorted(self.seconds())[-n:]

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.out.close()


# Tests of what the tool records (stacks, formats, faults, containers) probe every poll: short
# runs then give enough samples to check. The default armed windows (a 1% budget) have their
# own tests (test_overhead.py, test_core.py's estimation_with_default_windows).
ALWAYS_ARMED = ["--overhead-budget", "100"]


_tool_help = []


def _tool_has(option):
    """Whether TOOL knows an option (D9_TOOL may be an earlier build)."""
    if not _tool_help:
        _tool_help.append(subprocess.run([TOOL, "--help"], capture_output=True,
                                         text=True).stdout)
    return option in _tool_help[0]


def run_tool(*args, timeout=60, env=None, input_signal=None, signal_after=None, user=None,
             windows=False):
    """Runs dial9-bpf (always armed unless windows or a budget is given); returns
    (returncode, stdout, stderr)."""
    args = [*map(str, args)]
    if not windows and "--overhead-budget" not in args and args and args[0] != "report":
        args += ALWAYS_ARMED
    # Park samples only unless asked: on-CPU samples have tests of their own (test_oncpu.py).
    if "--cpu-hz" not in args and args and args[0] != "report" and _tool_has("--cpu-hz"):
        args += ["--cpu-hz", "0"]
    cmd = [TOOL, *args]
    if user:
        cmd = ["setpriv", "--reuid", str(user), "--regid", str(user), "--clear-groups",
               "--inh-caps=-all", *cmd]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=env)
    if signal_after is not None:
        time.sleep(signal_after)
        p.send_signal(input_signal or signal.SIGINT)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError("dial9-bpf timed out: " + err[-2000:])
    return p.returncode, out, err


def profile_demo(demo, seconds, prefix, *args, warmup=2):
    """Profiles a started Demo at the defaults (windows) for seconds after warmup seconds of
    its own, stops it, and returns the output directory; asserts a clean exit."""
    out = tmpdir(prefix)
    try:
        demo.wait_seconds(warmup)
        rc, _, err = run_tool("--pid", demo.pid, "--duration", seconds, "--output", out, *args,
                              timeout=seconds + 62, windows=True)
        assert rc == 0, err[-800:]
    finally:
        demo.stop()
    return out


def wait_stderr(errf, needle, p, timeout=20):
    """Waits until the file errf (a background tool's stderr) contains needle."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(errf) as f:
            if needle in f.read():
                return
        if p.poll() is not None:
            break
        time.sleep(0.05)
    with open(errf) as f:
        raise AssertionError(f"'{needle}' not on the tool's stderr: {f.read()[-1500:]}")


def read_stack_table(outdir):
    """stacks.jsonl of the stack_table layout: (header, {id: stack record}), each record's
    frame ids ("frames") replaced by the frames ("stack"), as the inline layout has them."""
    with open(os.path.join(outdir, "stacks.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    frames = {r.pop("frame"): r for r in lines[1:] if "frame" in r}
    stacks = {}
    for r in lines[1:]:
        if "id" in r:
            r["stack"] = [frames[i] for i in r.pop("frames")]
            stacks[r["id"]] = r
    return lines[0], stacks


def expand_rows(rows, header, records):
    """stack_table rows as the inline layout's objects (docs/formats.md)."""
    cols, absent = header["columns"], set(header.get("absent_when_null", []))
    out = []
    for row in rows:
        s = {k: v for k, v in zip(cols, row) if not (v is None and k in absent)}
        rec = records[s.pop("stack_id")]
        s.update((k, v) for k, v in rec.items() if k != "id")
        out.append(s)
    return out


def read_samples(outdir, kind="park"):
    """samples.jsonl as the inline layout's objects, whichever layout the run wrote: the
    samples of one kind ("park", "cpu"; None: all)."""
    with open(os.path.join(outdir, "samples.jsonl")) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    if lines and isinstance(lines[0], list):
        lines = expand_rows(lines, *read_stack_table(outdir))
    return [s for s in lines if kind is None or s.get("kind", "park") == kind]


def read_metadata(outdir):
    with open(os.path.join(outdir, "metadata.json")) as f:
        return json.load(f)


# The demo's task kinds by async fn, as its ground truth counts them.
KIND_OF = {"cpu_kind_task": "cpu", "timer_kind_task": "timer", "channel_kind_producer": "channel",
           "channel_kind_consumer": "channel", "blocking_kind_task": "blocking",
           "channel_kind_notifier": "channel", "channel_kind_notified": "channel",
           "idle_kind_task": "idle"}


def frame_names(sample):
    return [f["name"] or "" for f in sample["stack"]]


def kind_of(sample):
    """The demo kind of the innermost demo async fn on the stack (stack is leaf first)."""
    for name in frame_names(sample):
        for fn, kind in KIND_OF.items():
            if fn in name:
                return kind
    return None


def clean_epochs(meta, first=None, last=None):
    """Whole epochs of the run (or in [first, last]) in which every worker that made a
    transition sampled a whole, uncapped, calibrated epoch."""
    start = meta["sampling_started_at_ns"] // 10**9
    stop = meta["sampling_stopped_at_ns"] // 10**9
    good = set(range(start + 1 if first is None else first, stop if last is None else last + 1))
    for w in meta["workers"]:
        for e in w["epochs"]:
            if e["eligible"] and (e["calibrating"] or e["capped"] or not e["complete"]):
                good.discard(e["epoch"])
    return good


def delivery(meta):
    """(mean samples per worker per second over whole epochs, capped worker-epochs, of)."""
    first = meta["sampling_started_at_ns"] // 10**9 + 1
    last = meta["sampling_stopped_at_ns"] // 10**9 - 1
    rates, capped, n = [], 0, 0
    for w in meta["workers"]:
        eps = [e for e in w["epochs"] if first <= e["epoch"] <= last]
        if eps:
            rates.append(sum(e["selected"] for e in eps) / (last - first + 1))
            capped += sum(1 for e in eps if e["capped"])
            n += len(eps)
    return rates, capped, n


def unclean_reasons(meta):
    """Why epochs were left out of clean_epochs: {reason: worker-epochs}, for messages."""
    why = {}
    for w in meta["workers"]:
        for e in w["epochs"]:
            if not e["eligible"]:
                continue
            for r in ("calibrating", "capped"):
                if e[r]:
                    why[r] = why.get(r, 0) + 1
            if not e["complete"]:
                why["incomplete"] = why.get("incomplete", 0) + 1
    return why


def estimate_vs_truth(samples, meta, truth, classify=kind_of):
    """(usable epochs, {kind: (estimate, truth, samples)}) over the clean epochs; truth is
    Demo.seconds(); classify gives a sample's kind (kind_of: by its stack frames)."""
    good = clean_epochs(meta) & set(truth)
    assert len(good) >= 4, (f"only {len(good)} usable epochs (left out, worker-epochs: "
                            f"{unclean_reasons(meta)}; demo seconds {len(truth)})")
    est, n = {}, {}
    for s in samples:
        if s["epoch"] in good:
            k = classify(s)
            est[k] = est.get(k, 0) + 1 / s["inclusion_probability"]
            n[k] = n.get(k, 0) + 1
    return len(good), {k: (est.get(k, 0), sum(truth[e]["resumes"].get(k, 0) for e in good),
                           n.get(k, 0))
                       for k in ("cpu", "timer", "channel", "blocking", "idle")
                       if k in est or any(truth[e]["resumes"].get(k) for e in good)}


def future_kind(future):
    """The demo kind of a task type (its future's name), or None."""
    for fn, kind in KIND_OF.items():
        if future and fn in future:
            return kind
    return None


def counted_vs_truth(meta, truth, good):
    """{kind: estimate} from the in-window resume counts (metadata count_terms) over the
    epochs good."""
    est = {}
    for c in meta.get("count_terms") or []:
        k = future_kind(c["future"])
        if c["epoch"] in good and k:
            est[k] = est.get(k, 0) + c["sum"]
    return est


def counted_by_fn(meta, truth, good):
    """{async fn: (estimate, truth)} over the epochs good: each fn the demo spawns (its
    "fn_resumes"), estimated from the count_terms of the task types whose name holds it."""
    fns = {fn for e in good for fn in truth[e].get("fn_resumes", {})}
    return {fn: (sum(c["sum"] for c in meta.get("count_terms") or []
                     if c["epoch"] in good and fn in (c["future"] or "")),
                 sum(truth[e]["fn_resumes"][fn] for e in good))
            for fn in sorted(fns)}


def counted_se(meta, good):
    """{kind: standard error} of counted_vs_truth's estimates over the epochs good, from the
    count_terms as `dial9-bpf report` forms them (docs/formats.md): per task type Var = m / (m -
    1) x (sum_sq - sum^2 / m) + edge_sq + price_se^2 over the m windows of those epochs. A
    kind's types are summed as SEs, not variances: a channel's producer and consumer resume
    together, and the sum of SEs bounds that of their total."""
    m = sum(e["windows"] for e in meta["overhead"]["epochs"] if e["epoch"] in good)
    terms = {}
    for c in meta.get("count_terms") or []:
        if c["epoch"] in good:
            t = terms.setdefault(c["future"], [0.0, 0.0, 0.0, 0.0])
            t[0] += c["sum"]
            t[1] += c["sum_sq"]
            t[2] += c.get("edge_sq", 0)
            t[3] += c.get("price_se", 0)
    se = {}
    for future, (total, sq, edge, price) in terms.items():
        k = future_kind(future)
        if k and m > 1:
            var = max(0.0, m / (m - 1) * (sq - total * total / m)) + edge + price ** 2
            se[k] = se.get(k, 0.0) + var ** 0.5
    return se


def check_estimates_probed(kinds, tolerance=0.20):
    """Every poll probed (--overhead-budget 100): each kind with 100 samples or more within
    tolerance (20%) of the truth, or within three standard errors of a draw of its n samples
    (3 / sqrt(n), 26% at n = 129) where that is wider: a fixed 20% is 2.3 of them at n = 129,
    and a run of the suite checks dozens of kinds. At least two kinds checked. kinds as
    estimate_vs_truth gives them; returns the figures as text."""
    res = [f"{k}: est {got:.0f} / true {real} (n={n})" for k, (got, real, n) in kinds.items()]
    checked = 0
    for k, (got, real, n) in kinds.items():
        if n < 100:
            continue  # too few samples for a 20% bound to be meaningful
        checked += 1
        assert abs(got - real) <= max(tolerance, 3 / n ** 0.5) * real, "; ".join(res)
    assert checked >= 2, "fewer than 2 kinds with enough samples: " + "; ".join(res)
    return res


def check_estimates_windowed(kinds, meta, truth):
    """The default windows: all kinds together within 50%; with 50 samples or more, each kind's
    in-window counts (count_terms, the estimate `dial9-bpf report` gives per task type) within
    25% or three standard errors of them, whichever is wider, and CPU-bound tasks' samples
    within 0.4-2.0 (why: test_core.py, estimation_with_default_windows). Of a kind with a tenth
    of the resumes only a few of each window's are drawn, and its samples' estimate spreads
    about twice as widely as its counts' (bench/RESULTS.md, "Sampling and estimates"). The
    CPU-bound tasks' samples rest on the counts' base (collector_window_prob): with 1000 of
    them or more they are within 10% of the counts. Where the budget leaves one short window a
    second, where that window falls moves a kind's count by more than 25% in some runs (0.70
    once at 400 Hz after a late attach); its stated error says so. Returns the figures as
    text."""
    good = clean_epochs(meta) & set(truth)
    counted, se = counted_vs_truth(meta, truth, good), counted_se(meta, good)
    res = [f"{k}: est {got:.0f} / true {real} = {got / real if real else 0:.2f} (n={n}), "
           f"counted {counted.get(k, 0) / real if real else 0:.2f}"
           f" +- {se.get(k, 0) / real if real else 0:.2f}"
           for k, (got, real, n) in kinds.items()]
    total_est = sum(got for got, _, _ in kinds.values())
    total_real = sum(real for _, real, _ in kinds.values())
    res.append(f"all: {total_est / total_real:.2f}")
    assert abs(total_est - total_real) <= 0.50 * total_real, "; ".join(res)
    for k, (got, real, n) in kinds.items():
        if n < 50:
            continue
        assert abs(counted.get(k, 0) - real) <= max(0.25 * real, 3 * se.get(k, 0)), \
            "; ".join(res)
        if k == "cpu":
            assert 0.4 * real <= got <= 2.0 * real, "; ".join(res)
            if n >= 1000:
                assert abs(got - counted["cpu"]) <= 0.1 * counted["cpu"], \
                    "CPU tasks' samples against their counts: " + "; ".join(res)
    assert kinds["cpu"][2] >= 50 and kinds["timer"][2] >= 50, "; ".join(res)
    return res


def complete_epochs(meta):
    """Per worker: {epoch: stats} for epochs that ran whole and were not calibrating."""
    res = {}
    start = meta["sampling_started_at_ns"] // 10**9
    stop = meta["sampling_stopped_at_ns"] // 10**9
    for w in meta["workers"]:
        res[w["worker"]] = {e["epoch"]: e for e in w["epochs"]
                            if e["complete"] and not e["calibrating"]
                            and start < e["epoch"] < stop}
    return res


class KnownGap(Exception):
    """A check of an open issue's target that the tool itself says it does not meet on this
    machine (metadata: overhead.slow_traps): counted as neither passed nor failed, and listed
    with what it measured, so that the gap stays in every run's output."""


def check_or_known(ok, desc, meta, issue):
    """Asserts ok; where the tool reports slow probe traps (ARMING_SLOW_HIT_NS), or windows
    held shorter than the workers' wait for a CPU in a third of the epochs or more
    (arming_short_noted), a
    failure is a KnownGap of the issue named instead."""
    if ok:
        return
    if meta["overhead"].get("slow_traps"):
        price = meta["overhead"]["probe_hit_cost_ns"]["per_hit"] / 1e3
        raise KnownGap(f"{desc} (issue {issue}: not met where a probe hit costs "
                       f"{price:.1f} us, as the tool says at exit)")
    short = meta["overhead"].get("windows_short_of_wait", {})
    if short.get("noted"):
        raise KnownGap(f"{desc} (issue {issue}: not met where the budget's windows, "
                       f"{short['window_ms']:.0f} ms, fall short of the workers' "
                       f"{short['wait_ms']:.0f} ms wait for a CPU in {short['epochs']} of "
                       f"{short['of']} epochs, as the tool says at exit)")
    raise AssertionError(desc)


def run_all():
    summary = None
    if "--summary-file" in sys.argv:
        summary = sys.argv[sys.argv.index("--summary-file") + 1]
    only = [a for a in sys.argv[1:] if not a.startswith("--") and a != summary]
    passed = failed = known = 0
    name = os.path.basename(sys.argv[0])
    # Only the running file's own tests: another test file imported for its helpers
    # registers its tests too.
    try:
        for fn in _tests:
            if fn.__module__ != "__main__" or (only and fn.__name__ not in only):
                continue
            t0 = time.time()
            try:
                detail = fn()
                passed += 1
                print(f"PASS {name}::{fn.__name__} ({time.time() - t0:.1f}s)"
                      + (f": {detail}" if detail else ""), flush=True)
            except KnownGap as e:
                known += 1
                print(f"KNOWN {name}::{fn.__name__} ({time.time() - t0:.1f}s): {e}", flush=True)
            except Exception as e:  # noqa: BLE001 - a test fails on any error
                failed += 1
                print(f"FAIL {name}::{fn.__name__} ({time.time() - t0:.1f}s): {e}", flush=True)
                traceback.print_exc(limit=3, file=sys.stdout)
    finally:
        # Every file's, whether or not its own main cleans up: root-owned folders left in /tmp
        # by each run of the suite add up.
        remove_tmpdirs()
    print(f"{passed} passed, {failed} failed" + (f", {known} known gaps" if known else ""))
    if summary:
        with open(summary, "w") as f:
            f.write(f"{passed} {failed}" + (f" {known}" if known else "") + "\n")
    return 1 if failed else 0
