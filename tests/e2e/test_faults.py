#!/usr/bin/env python3
"""Faults, lifecycle and hostile input: the target exits, execs, churns threads; the tool is
SIGKILLed or flooded; bad targets are refused with one clear line; two tools on one pid.

Expected behaviour, as tested here:
- the target exits: the tool finishes every output (stop_reason "target_exited"), exits 0;
- the target execs another program: the probes sat on the old executable's inode and never
  fire again, so the tool stops the same way, stop_reason "target_exec", message "exec'd";
  an exec of the same executable keeps the probes firing, but in a new address space: a
  sched_process_exec event stops the tool the same way;
- the tool is SIGKILLed: the kernel removes its probes (the links die with the process);
  samples.jsonl holds every completed line (the last may be cut), metadata.json is missing and
  the other outputs are left as *.tmp files, which are incomplete by definition;
- a flood the ring buffer cannot carry: drops are counted in metadata.json
  (counters.ring_buffer_drops) and printed in the stderr summary; the tool's RSS stays flat.
"""
import json
import os
import shutil
import signal
import subprocess
import time

from harness import (ALWAYS_ARMED, DEMO_FNS, DEMO_FP, TOOL, Demo, read_metadata, read_samples,
                     run_all, run_tool, test, wait_stderr, tmpdir)


# Preloaded into the demo: exec another program when a trigger file appears, or spawn and join
# threads at a given rate. The demo has no flag for either.
HELPER_C = r"""
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

static char trigger[4096];
static long churn_per_sec;

static void *exec_later(void *arg)
{
	char *argv[] = {"sleep", "30", NULL}, *envp[] = {NULL};
	char *self[] = {"demo", "--workers", "2", "--duration", "30", NULL};
	struct stat st;

	(void)arg;
	while (stat(trigger, &st))
		usleep(20000);
	if (getenv("D9_EXEC_SELF")) /* the same executable again, without this library */
		execve("/proc/self/exe", self, envp);
	execve("/bin/sleep", argv, envp);
	return NULL;
}

static void *nothing(void *arg)
{
	return arg;
}

static void *churn(void *arg)
{
	(void)arg;
	for (;;) {
		pthread_t t[10];

		for (int i = 0; i < 10; i++)
			pthread_create(&t[i], NULL, nothing, NULL);
		for (int i = 0; i < 10; i++)
			pthread_join(t[i], NULL);
		usleep(10000000 / churn_per_sec);
	}
	return NULL;
}

__attribute__((constructor)) static void init(void)
{
	const char *e = getenv("D9_EXEC_TRIGGER"), *c = getenv("D9_CHURN_PER_SEC");
	pthread_t t;

	if (e) {
		size_t n = 0;

		while (e[n] && n < sizeof(trigger) - 1) {
			trigger[n] = e[n];
			n++;
		}
		pthread_create(&t, NULL, exec_later, NULL);
	}
	if (c && atol(c) > 0) {
		churn_per_sec = atol(c);
		pthread_create(&t, NULL, churn, NULL);
	}
}
"""

_cache = {}


def helper_so():
    if "so" not in _cache:
        d = tmpdir("d9helper-")
        src = os.path.join(d, "helper.c")
        with open(src, "w") as f:
            f.write(HELPER_C)
        so = os.path.join(d, "helper.so")
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-pthread", src, "-o", so], check=True)
        _cache["so"] = so
    return _cache["so"]




def named_fraction(samples):
    named = sum(1 for s in samples
                if any(fn in (f["name"] or "") for f in s["stack"] for fn in DEMO_FNS))
    return named / len(samples) if samples else 0.0


def start_tool(*args):
    """The tool in the background, stderr to a file; returns (Popen, stderr path)."""
    errf = os.path.join(tmpdir("d9err-"), "stderr")
    with open(errf, "w") as ef:
        p = subprocess.Popen([TOOL, *map(str, args), *ALWAYS_ARMED], stdout=subprocess.DEVNULL,
                             stderr=ef)
    return p, errf


def finish(p, errf, timeout=30):
    try:
        p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise AssertionError("dial9-bpf did not stop")
    with open(errf) as f:
        return p.returncode, f.read()


def perf_report_ok(out):
    """perf report can read perf.data; returns its number of sample lines."""
    home = tmpdir("d9home-")
    r = subprocess.run(["perf", "report", "-i", os.path.join(out, "perf.data"), "--stdio"],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, HOME=home))
    assert r.returncode == 0, f"perf report failed: {r.stderr[-800:]}"
    m = [l for l in r.stdout.splitlines() if l.startswith("# Samples:")]
    assert m, f"perf report shows no samples: {r.stdout[:800]}"
    return m[0]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


@test
def target_exits_mid_run():
    d = Demo(workers=2, mode="mix")
    out = tmpdir("d9out-exit-")
    try:
        p, errf = start_tool("--pid", d.pid, "--duration", 60, "--output", out)
        wait_stderr(errf, "sampling pid", p)
        time.sleep(2)
        d.stop()
        t0 = time.time()
        rc, err = finish(p, errf)
        stop_s = time.time() - t0
    finally:
        d.stop()
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    assert "exited; finishing outputs" in err, err[-1500:]
    meta = read_metadata(out)
    assert meta["stop_reason"] == "target_exited", meta["stop_reason"]
    samples = read_samples(out)
    assert samples, "no samples before the exit"
    frac = named_fraction(samples)
    assert frac >= 0.9, f"only {frac:.0%} of samples symbolized after the target exited"
    perf = perf_report_ok(out)
    leftovers = [f for f in os.listdir(out) if f.endswith(".tmp")]
    assert not leftovers, f"unfinished outputs: {leftovers}"
    return (f"stopped {stop_s:.1f}s after the exit; {len(samples)} samples, {frac:.0%} named; "
            f"perf report: {perf}")


def profile_through_exec(self_exec):
    """Profiles a demo that execs 2 s in (itself again, or /bin/sleep): the tool's exit code,
    stderr, seconds from the exec to its exit, output dir, and the target's exe identity
    before and after, comm and argv after."""
    trig = os.path.join(tmpdir("d9trig-"), "go")
    env = dict(os.environ, LD_PRELOAD=helper_so(), D9_EXEC_TRIGGER=trig)
    if self_exec:
        env["D9_EXEC_SELF"] = "1"
    d = Demo(workers=2, mode="mix", env=env)
    out = tmpdir("d9out-exec-")
    r = {"out": out}
    try:
        r["exe0"] = os.stat(f"/proc/{d.pid}/exe")
        p, errf = start_tool("--pid", d.pid, "--duration", 60, "--output", out)
        wait_stderr(errf, "sampling pid", p)
        time.sleep(2)
        open(trig, "w").close()
        t0 = time.time()
        r["rc"], r["err"] = finish(p, errf)
        r["stop_s"] = time.time() - t0
        r["exe1"] = os.stat(f"/proc/{d.pid}/exe")
        with open(f"/proc/{d.pid}/comm") as f:
            r["comm"] = f.read().strip()
        with open(f"/proc/{d.pid}/cmdline") as f:
            r["cmdline"] = f.read().split("\0")
    finally:
        d.stop()
    return r


def check_stopped_at_exec(r):
    """Samples from before the exec kept, and the stop said so."""
    err = r["err"]
    assert r["rc"] == 0, f"exit {r['rc']}: {err[-1500:]}"
    assert "exec'd" in err, err[-1500:]
    meta = read_metadata(r["out"])
    assert meta["stop_reason"] == "target_exec", meta["stop_reason"]
    samples = read_samples(r["out"])
    assert samples and named_fraction(samples) >= 0.9, "samples before the exec not kept"
    return samples


@test
def target_execs_another_program():
    r = profile_through_exec(self_exec=False)
    assert r["comm"] == "sleep", f"the demo did not exec: comm {r['comm']}"
    samples = check_stopped_at_exec(r)
    perf = perf_report_ok(r["out"])
    return f"stopped {r['stop_s']:.1f}s after the exec; {len(samples)} samples kept; {perf}"


@test
def target_execs_same_executable():
    r = profile_through_exec(self_exec=True)
    exe0, exe1 = r["exe0"], r["exe1"]
    assert (exe0.st_dev, exe0.st_ino) == (exe1.st_dev, exe1.st_ino), "not the same executable"
    assert r["cmdline"][:2] == ["demo", "--workers"], \
        f"the demo did not exec itself: {r['cmdline']}"
    samples = check_stopped_at_exec(r)
    assert r["stop_s"] < 5, f"stopped {r['stop_s']:.1f}s after the exec"
    return (f"stopped {r['stop_s']:.1f}s after exec'ing the same file; {len(samples)} samples "
            f"kept")


def rss_growth_kb(pid, out, env=None):
    """(RSS after 1.5 s, after 4.5 s, exit code, stderr) of a 5 s run against pid."""
    p, errf = start_tool("--pid", pid, "--duration", 5, "--output", out, "--quiet",
                         "--per-worker-hz", 50)
    time.sleep(1.5)
    rss = [rss_kb(p.pid)]
    time.sleep(3)
    rss.append(rss_kb(p.pid))
    rc, err = finish(p, errf)
    return rss, rc, err


@test
def thread_churn_in_target():
    rate = 500
    env = dict(os.environ, LD_PRELOAD=helper_so(), D9_CHURN_PER_SEC=str(rate))
    # Without churn first: the tool's RSS grows as the DWARF of the frames it names (inlined
    # calls) is read, which has nothing to do with threads coming and going.
    calm = Demo(workers=2, mode="mix")
    try:
        base, _, _ = rss_growth_kb(calm.pid, tmpdir("d9out-calm-"))
    finally:
        calm.stop()
    d = Demo(workers=2, mode="mix", env=env)
    out = tmpdir("d9out-churn-")
    try:
        with open("/proc/loadavg") as f:
            last0 = int(f.read().split()[4])
        rss, rc, err = rss_growth_kb(d.pid, out)
        with open("/proc/loadavg") as f:
            spawned = int(f.read().split()[4]) - last0
        alive = d.alive()
    finally:
        d.stop()
    assert alive, "the target died"
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    assert not err.strip(), f"stderr not empty under thread churn: {err[-1500:]}"
    meta = read_metadata(out)
    samples = read_samples(out)
    assert len(samples) >= 100, f"only {len(samples)} samples"
    assert named_fraction(samples) >= 0.9
    assert meta["counters"]["ring_buffer_drops"] == 0, meta["counters"]
    grew, calm_grew = rss[1] - rss[0], base[1] - base[0]
    assert grew <= calm_grew + 8192, \
        f"tool RSS grew {rss[0]} -> {rss[1]} kB under churn, {base[0]} -> {base[1]} without"
    return (f"~{spawned} pids allocated host-wide in the run; {len(samples)} samples; "
            f"tool RSS {rss[0]} -> {rss[1]} kB ({base[0]} -> {base[1]} kB without churn)")


@test
def sigkill_leaves_no_probe_and_readable_outputs():
    d = Demo(workers=2, mode="hot")
    out = tmpdir("d9out-kill-")
    try:
        d.wait_seconds(1)
        before = d.cpu_ns_per_poll(3)
        p, errf = start_tool("--pid", d.pid, "--output", out, "--overhead-budget", 100,
                             "--per-worker-hz", 200)
        wait_stderr(errf, "sampling pid", p)
        during = d.cpu_ns_per_poll(2)
        # Samples reach samples.jsonl once their epoch is over: wait for some.
        jsonl = os.path.join(out, "samples.jsonl")
        deadline = time.time() + 10
        while time.time() < deadline and p.poll() is None:
            with open(jsonl, "rb") as f:
                if f.read().count(b"\n") >= 50:
                    break
            time.sleep(0.2)
        p.send_signal(signal.SIGKILL)
        p.wait(10)
        after = d.cpu_ns_per_poll(3)
        assert d.alive(), "target died"
        links = subprocess.run(["bpftool", "perf", "list"], capture_output=True,
                               text=True).stdout
        assert f"pid {d.pid} " not in links, links
    finally:
        d.stop()
        # A killed tool leaves its lock file, unlocked (flock dies with it): harmless.
        lock = f"/run/dial9-bpf/{d.pid}.lock"
        if os.path.exists(lock):
            os.unlink(lock)
    assert during >= 1.2 * before, f"probes not measurable: {before:.0f} vs {during:.0f} ns"
    assert after <= 1.10 * before, \
        f"CPU per poll after SIGKILL {after:.0f} ns vs before {before:.0f} ns"
    # Outputs up to the last completed record.
    with open(os.path.join(out, "samples.jsonl")) as f:
        lines = f.read().split("\n")
    whole = lines[:-1]  # the part after the last newline may be a cut line
    for l in whole:
        json.loads(l)
    assert len(whole) >= 50, f"only {len(whole)} complete sample lines after SIGKILL"
    # stacks.jsonl reached the disk before every row naming its records.
    assert len(read_samples(out, kind=None)) == len(whole)
    files = sorted(os.listdir(out))
    assert "metadata.json" not in files, files
    assert "perf.data" not in files, f"a perf.data perf would choke on: {files}"
    return (f"CPU per poll: before {before:.0f}, attached {during:.0f}, after SIGKILL "
            f"{after:.0f} ns ({after / before:.2f}); {len(whole)} whole sample lines "
            f"(+{len(lines[-1])} bytes cut); files {files}")


@test
def flood_counts_drops_and_bounded_rss():
    d = Demo(workers=2, mode="hot")
    out = tmpdir("d9out-flood-")
    secs = 25  # a 10-minute run by hand showed the same plateau
    try:
        d.wait_seconds(1)
        p, errf = start_tool("--pid", d.pid, "--output", out, "--duration", secs,
                             "--per-worker-hz", 100000, "--cap-burst", 1000000,
                             "--format", "jsonl")
        wait_stderr(errf, "sampling pid", p)
        rss = []
        t0 = time.time()
        while p.poll() is None and time.time() - t0 < secs - 1:
            rss.append(rss_kb(p.pid))
            if len(rss) == 3:
                # However fast this machine drains the ring buffer, a stalled reader
                # overflows it: 3 s of a flood are more than its 16 MiB.
                p.send_signal(signal.SIGSTOP)
                time.sleep(3)
                p.send_signal(signal.SIGCONT)
            time.sleep(1)
        rc, err = finish(p, errf, timeout=60)
    finally:
        d.stop()
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    meta = read_metadata(out)
    drops = meta["counters"]["ring_buffer_drops"]
    assert drops > 0, f"no drops counted after a stalled reader: {meta['counters']}"
    summary = [l for l in err.splitlines() if "ring-buffer drops" in l and "after" in l]
    assert summary, f"no summary line: {err[-1500:]}"
    assert f"{drops} ring-buffer drops" in summary[-1], (drops, summary[-1])
    # After warm-up (8 s) RSS swings with the backlog of samples waiting for their epoch to
    # close, but must not trend up: the last third peaks no higher than the first.
    warm = rss[8:]
    assert len(warm) >= 12, f"too few RSS readings: {rss}"
    k = len(warm) // 3
    first, last = max(warm[:k]), max(warm[-k:])
    assert last <= 1.10 * first + 4096, f"tool RSS grew after warm-up (kB): {rss}"
    return (f"drops {drops} (summary: ...{summary[-1][-100:]}); "
            f"RSS kB: 2s {rss[2]}, warm-up peak first third {first}, last third {last}, "
            f"max {max(rss)}")


def expect_refusal(pid, needle, env=None):
    out = tmpdir("d9err-")
    shutil.rmtree(out)
    rc, _, err = run_tool("--pid", pid, "--output", out, env=env)
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc != 0, f"pid {pid}: exit 0"
    assert len(lines) == 1, f"pid {pid}: expected one stderr line, got {lines}"
    assert needle in lines[0], f"'{needle}' not in '{lines[0]}'"
    assert not os.path.exists(out), "output left behind"
    return lines[0]


@test
def zombie_refused():
    z = subprocess.Popen(["true"])
    try:
        deadline = time.time() + 5
        while time.time() < deadline:
            with open(f"/proc/{z.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            time.sleep(0.02)
        else:
            raise AssertionError("no zombie")
        return expect_refusal(z.pid, "zombie")
    finally:
        z.wait()


@test
def deleted_executable_still_profiled():
    tmp = tmpdir("d9del-")
    exe = os.path.join(tmp, "dial9-demo")
    shutil.copy(DEMO_FP, exe)
    d = Demo(binary=exe)
    out = tmpdir("d9out-del-")
    try:
        os.unlink(exe)
        assert os.readlink(f"/proc/{d.pid}/exe").endswith("(deleted)")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 3, "--output", out, "--quiet")
    finally:
        d.stop()
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    samples = read_samples(out)
    frac = named_fraction(samples)
    assert len(samples) >= 20 and frac >= 0.9, f"{len(samples)} samples, {frac:.0%} named"
    mods = {f["module"] for s in samples for f in s["stack"]}
    assert exe in mods, mods
    return f"{len(samples)} samples, {frac:.0%} named; modules {sorted(m for m in mods if m)}"


@test
def second_tool_refused_while_first_runs():
    d = Demo(workers=2, mode="mix")
    out = tmpdir("d9out-first-")
    lock = f"/run/dial9-bpf/{d.pid}.lock"
    try:
        p, errf = start_tool("--pid", d.pid, "--output", out)
        wait_stderr(errf, "sampling pid", p)
        assert os.path.exists(lock), f"no {lock}"
        line = expect_refusal(d.pid, f"dial9-bpf pid {p.pid}")
        assert p.poll() is None, "the first tool stopped"
        p.send_signal(signal.SIGINT)
        rc, err = finish(p, errf)
        assert rc == 0, f"first tool exit {rc}: {err}"
        assert not os.path.exists(lock), "lock file left behind"
        read_metadata(out)
        # Free again: a third tool runs.
        out2 = tmpdir("d9out-third-")
        rc, _, err = run_tool("--pid", d.pid, "--duration", 1, "--output", out2, "--quiet")
        assert rc == 0, f"third tool exit {rc}: {err[-800:]}"
    finally:
        d.stop()
    return line


if __name__ == "__main__":
    raise SystemExit(run_all())
