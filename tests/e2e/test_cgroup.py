#!/usr/bin/env python3
"""--cgroup and --container: every Tokio process of a cgroup v2 subtree, each in its own pid-*
directory, including processes that start or exec while the tool runs.

Expected behaviour, as tested here:
- a demo there at the start, a demo started later in a descendant cgroup, and a shell that
  execs a demo (non-Tokio, then Tokio) are each profiled into OUT/pid-PID with samples of
  that pid only; when that demo execs another Tokio program its profile stops with
  stop_reason target_exec and a new one goes to OUT/pid-PID-2;
- a non-Tokio process (sleep) is skipped without error and listed in processes.json;
- SIGINT to the tool reaches every child: all outputs finished, no *.tmp left;
- --container matches a prefix of a 64-hex id in a cgroup path, or whole path components;
- a missing or non-cgroup --cgroup, a --container matching nothing or several cgroups, and
  --pid with --cgroup are refused with one stderr line, a non-zero exit and no output dir.
Each test removes its cgroups (leftover pids go back to the root cgroup) and processes.
"""
import json
import os
import secrets
import signal
import subprocess
import time

from harness import (ALWAYS_ARMED, DEMO_FP, DEMO_NOFP, TOOL, read_samples, remove_tmpdirs, run_all, run_tool,
                     test, tmpdir, wait_stderr)

# Preloaded into a demo: when the trigger file appears, exec another Tokio program (the demo
# has no flag for that). LD_PRELOAD is not passed on, so the new program does not exec again.
EXEC_HELPER_C = r"""
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>
#include <sys/stat.h>

static void *exec_later(void *arg)
{
	char *argv[] = {"dial9-demo", "--workers", "1", "--mode", "mix", "--duration", "0", NULL};
	char *envp[] = {NULL};
	struct stat st;

	(void)arg;
	while (stat(getenv("D9_EXEC_TRIGGER"), &st))
		usleep(20000);
	execve(getenv("D9_EXEC_TO"), argv, envp);
	return NULL;
}

__attribute__((constructor)) static void init(void)
{
	pthread_t t;

	if (getenv("D9_EXEC_TRIGGER") && getenv("D9_EXEC_TO"))
		pthread_create(&t, NULL, exec_later, NULL);
}
"""

DEMO_ARGS = ["--workers", "1", "--mode", "mix", "--duration", "0"]


def cgroup2_mount():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, post = line.split(" - ", 1)
            if post.split()[0] == "cgroup2":
                return pre.split()[4]
    raise AssertionError("no cgroup2 mount")


def exec_helper():
    d = tmpdir("d9cg-helper-")
    src, so = os.path.join(d, "helper.c"), os.path.join(d, "helper.so")
    with open(src, "w") as f:
        f.write(EXEC_HELPER_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-pthread", src, "-o", so], check=True)
    return so


class Cgroup:
    """A cgroup v2 subtree for one test, removed with its processes by close()."""

    def __init__(self, *subdirs):
        self.path = os.path.join(cgroup2_mount(), "d9test-" + secrets.token_hex(4))
        self.dirs = [self.path] + [os.path.join(self.path, s) for s in subdirs]
        self.procs = []
        for d in self.dirs:
            os.makedirs(d)

    def spawn(self, cmd, sub=None, env=None):
        """Runs cmd inside the cgroup (sub: a subdir): a shell joins it, then execs cmd."""
        procs = os.path.join(self.path, sub or "", "cgroup.procs")
        p = subprocess.Popen(["sh", "-c", 'echo $$ >"$0" && exec "$@"', procs, *cmd],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                             start_new_session=True)
        self.procs.append(p)
        deadline = time.time() + 5
        while time.time() < deadline:
            with open(procs) as f:
                if str(p.pid) in f.read().split():
                    return p
            time.sleep(0.01)
        raise AssertionError(f"{cmd[0]} did not join {procs}")

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        root = os.path.join(cgroup2_mount(), "cgroup.procs")
        for d in reversed(self.dirs):
            for _ in range(50):
                try:
                    with open(os.path.join(d, "cgroup.procs")) as f:
                        left = f.read().split()
                    for pid in left:
                        try:
                            with open(root, "w") as f:
                                f.write(pid)
                        except OSError:
                            pass  # exited meanwhile
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)  # a process still exiting


def tmp_files(out):
    return [os.path.join(r, f) for r, _, fs in os.walk(out) for f in fs if f.endswith(".tmp")]


def read_processes(out):
    with open(os.path.join(out, "processes.json")) as f:
        return json.load(f)


@test
def processes_that_start_and_exec_each_get_a_profile():
    cg = Cgroup("late")
    out = os.path.join(tmpdir("d9out-cg-"), "run")
    errf = os.path.join(tmpdir("d9err-cg-"), "stderr")
    trig = os.path.join(tmpdir("d9trig-cg-"), "go")
    tool = None
    try:
        first = cg.spawn([DEMO_FP, *DEMO_ARGS])
        sleeper = cg.spawn(["sleep", "100"])
        with open(errf, "w") as ef:
            tool = subprocess.Popen([TOOL, "--cgroup", cg.path, "--output", out, "-v", *ALWAYS_ARMED],
                                    stdout=subprocess.DEVNULL, stderr=ef)
        wait_stderr(errf, f"[pid-{first.pid}] dial9-bpf: sampling pid {first.pid}", tool)
        late = cg.spawn([DEMO_FP, *DEMO_ARGS], sub="late")
        # Starts as a shell (not Tokio), execs the demo a second later, which execs the nofp
        # demo (another Tokio program) when the trigger file appears.
        env = dict(os.environ, LD_PRELOAD=exec_helper(), D9_EXEC_TRIGGER=trig,
                   D9_EXEC_TO=DEMO_NOFP)
        execer = cg.spawn(["sh", "-c", 'sleep 1; exec "$@"', "sh", DEMO_FP, *DEMO_ARGS],
                          env=env)
        wait_stderr(errf, f"[pid-{late.pid}] dial9-bpf: sampling pid {late.pid}", tool)
        wait_stderr(errf, f"[pid-{execer.pid}] dial9-bpf: sampling pid {execer.pid}", tool)
        time.sleep(2.5)  # 10 samples/s once sampling: samples.jsonl is written in blocks
        open(trig, "w").close()
        wait_stderr(errf, f"[pid-{execer.pid}-2] dial9-bpf: sampling pid {execer.pid}", tool)
        time.sleep(2.5)
        tool.send_signal(signal.SIGINT)
        tool.wait(30)
        with open(errf) as f:
            err = f.read()
        sleeper_alive = sleeper.poll() is None
    finally:
        if tool and tool.poll() is None:
            tool.kill()
            tool.wait()
        cg.close()
    assert tool.returncode == 0, f"exit {tool.returncode}: {err[-2000:]}"
    assert sleeper_alive
    want = {f"pid-{first.pid}": (first.pid, "demo-fp", "sigint"),
            f"pid-{late.pid}": (late.pid, "demo-fp", "sigint"),
            f"pid-{execer.pid}": (execer.pid, "demo-fp", "target_exec"),
            f"pid-{execer.pid}-2": (execer.pid, "demo-nofp", "sigint")}
    subdirs = sorted(d for d in os.listdir(out) if os.path.isdir(os.path.join(out, d)))
    assert subdirs == sorted(want), f"{subdirs}, wanted {sorted(want)}"
    counts = {}
    for sub, (pid, _, reason) in want.items():
        samples = read_samples(os.path.join(out, sub))
        assert samples, f"{sub}: no samples"
        assert {s["pid"] for s in samples} == {pid}, f"{sub}: pids {({s['pid'] for s in samples})}"
        with open(os.path.join(out, sub, "metadata.json")) as f:
            meta = json.load(f)
        assert meta["stop_reason"] == reason, f"{sub}: stop_reason {meta['stop_reason']}"
        counts[sub] = len(read_samples(os.path.join(out, sub), kind=None))  # cpu ones too
    assert not tmp_files(out), tmp_files(out)
    procs = read_processes(out)
    assert procs["stop_reason"] == "sigint" and procs["cgroup"] == cg.path, procs
    listed = {p["subdir"]: p for p in procs["processes"]}
    assert sorted(listed) == sorted(want), listed.keys()
    for sub, (pid, exe, reason) in want.items():
        p = listed[sub]
        assert p["pid"] == pid and p["ns_pid"] == pid, p
        assert os.path.basename(p["exe"]) == exe, p
        assert p["stop_reason"] == reason and p["exit_code"] == 0 and not p["failed"], p
        assert p["samples"] == counts[sub], (p, counts[sub])
        assert 0 < p["started_realtime_ns"] < p["stopped_realtime_ns"], p
    assert listed[f"pid-{late.pid}"]["cgroup"] == os.path.join(cg.path, "late")
    skipped = {s["pid"]: s for s in procs["skipped"]}
    assert skipped[sleeper.pid]["reason"] == "not a Tokio program", skipped
    assert os.path.basename(skipped[sleeper.pid]["exe"]) == "sleep", skipped
    assert execer.pid in skipped, "the shell before its exec was not seen"
    assert "failed" not in err.replace("0 profiles failed", ""), err[-2000:]
    assert "sigint after" in err and "4 profiles of 3 Tokio processes" in err, err[-1000:]

    r = subprocess.run([TOOL, "report", out], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-1000:]
    for sub in want:
        assert f"== {sub}: pid " in r.stdout, f"report lacks {sub}: {r.stdout[:1500]}"
    return f"{counts}; skipped {sorted(skipped)}"


@test
def container_id_prefix_and_path_components():
    cid = secrets.token_hex(32)
    cg = Cgroup(f"docker-{cid}.scope")
    out = os.path.join(tmpdir("d9out-ctr-"), "run")
    out2 = os.path.join(tmpdir("d9out-ctr-"), "run")
    try:
        d = cg.spawn([DEMO_FP, *DEMO_ARGS], sub=f"docker-{cid}.scope")
        t0 = time.time()
        rc, _, err = run_tool("--container", cid[:12], "--duration", 3, "--output", out, "-q")
        took = time.time() - t0
        # A whole component names the parent cgroup: too short a run for a profile.
        rc2, _, err2 = run_tool("--container", os.path.basename(cg.path), "--duration", 0.2,
                                "--output", out2)
    finally:
        cg.close()
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    assert took < 3 + 6, f"--duration 3 took {took:.1f}s"
    procs = read_processes(out)
    assert procs["cgroup"] == cg.dirs[1] and procs["container"] == cid[:12], procs
    assert procs["stop_reason"] == "duration", procs["stop_reason"]
    assert [p["subdir"] for p in procs["processes"]] == [f"pid-{d.pid}"], procs["processes"]
    assert procs["processes"][0]["stop_reason"] == "duration", procs["processes"]
    samples = read_samples(os.path.join(out, f"pid-{d.pid}"))
    assert samples and {s["pid"] for s in samples} == {d.pid}
    assert not tmp_files(out), tmp_files(out)
    assert rc2 == 0, f"exit {rc2}: {err2[-1500:]}"
    assert f"watching cgroup {cg.path} (container" in err2, err2
    assert read_processes(out2)["cgroup"] == cg.path
    return f"{len(samples)} samples in {took:.1f}s"


def refused(args, needle):
    out = os.path.join(tmpdir("d9out-bad-"), "run")
    rc, _, err = run_tool(*args, "--output", out, "--duration", 1, timeout=30)
    lines = err.strip().splitlines()
    assert rc != 0, f"{args}: exit 0"
    assert len(lines) == 1 and needle in lines[0], f"{args}: {err!r}"
    assert not os.path.exists(out), f"{args}: output created"
    return lines[0]


@test
def bad_cgroups_and_ids_refused():
    prefix = secrets.token_hex(4)
    ids = [prefix + secrets.token_hex(28) for _ in range(2)]
    cg = Cgroup(*(f"docker-{i}.scope" for i in ids))
    try:
        for i in ids:
            cg.spawn(["sleep", "30"], sub=f"docker-{i}.scope")
        msgs = [
            refused(["--cgroup", cg.path + "-missing"], "No such file or directory"),
            refused(["--cgroup", "/tmp"], "not a cgroup directory"),
            refused(["--container", "nomatch-" + secrets.token_hex(4)], "matches no cgroup"),
            refused(["--container", prefix], "matches several cgroups"),
            refused(["--cgroup", cg.path, "--pid", "1"], "exclude each other"),
        ]
    finally:
        cg.close()
    return "; ".join(m[:60] for m in msgs)


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        remove_tmpdirs()
    raise SystemExit(rc)
