#!/usr/bin/env python3
"""Containers: targets in their own pid and mount namespaces, the tool in its own pid namespace,
and a container that plants symlinks to host files where the tool looks for mapped files.

- A binary that exists only inside the target's mount namespace is read through /proc/PID/exe
  and /proc/PID/map_files; samples carry host ids (pid, tid) and in-namespace ids (ns_pid,
  ns_tid).
- The tool inside a pid namespace takes and reports pids as that namespace sees them.
- Without CAP_SYS_ADMIN (no map_files/), mapped files are opened by path under /proc/PID/root
  with RESOLVE_IN_ROOT: an absolute symlink the container planted resolves inside the container,
  never to the host file it names; a FIFO planted there does not hang the tool.
"""
import json
import os
import shutil
import signal
import subprocess
import time

from harness import ALWAYS_ARMED, DEMO_FNS, DEMO_FP, TOOL, read_metadata, read_samples, run_all, test, tmpdir

NO_SYS_ADMIN = ["setpriv", "--bounding-set", "-sys_admin,-checkpoint_restore", "--inh-caps",
                "-sys_admin,-checkpoint_restore"]



def named(samples):
    return sum(1 for s in samples
               if any(fn in (f["name"] or "") for f in s["stack"] for fn in DEMO_FNS))


def descendants(pid):
    out = []
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/children") as f:
                for c in f.read().split():
                    out.append(int(c))
                    out.extend(descendants(int(c)))
    except OSError:
        pass
    return out


class Container:
    """A shell script run under unshare; the demo it execs is found among its descendants."""

    def __init__(self, unshare_args, script, *script_args):
        self.dir = tmpdir("d9ctr-")
        self.out_path = os.path.join(self.dir, "demo.jsonl")
        self.err_path = os.path.join(self.dir, "demo.err")
        path = os.path.join(self.dir, "ctr.sh")
        with open(path, "w") as f:
            f.write(script)
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(["unshare", *unshare_args, "sh", path,
                                          *map(str, script_args)],
                                         stdout=out, stderr=err, start_new_session=True)
        self.pid = None
        deadline = time.time() + 10
        while time.time() < deadline:
            for p in descendants(self.proc.pid):
                try:
                    with open(f"/proc/{p}/comm") as f:
                        if f.read().strip() == "dial9-demo":
                            self.pid = p
                except OSError:
                    pass
            if self.pid and os.path.getsize(self.out_path) > 0:
                break
            time.sleep(0.05)
        else:
            with open(self.err_path) as f:
                self.stop()
                raise AssertionError(f"container demo did not start: {f.read()[-800:]}")

    def in_ns(self, cmd):
        """Runs a shell command inside the demo's mount and pid namespaces and root."""
        r = subprocess.run(["nsenter", "-t", str(self.pid), "-m", "-p", "-r", "sh", "-c", cmd],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 0, f"{cmd}: {r.stderr}"
        return r.stdout

    def stop(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


def tool(args, wrap=(), timeout=60):
    p = subprocess.run([*wrap, TOOL, *map(str, args), *ALWAYS_ARMED], capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stderr


# The binary is copied onto a tmpfs mounted only inside the namespace: its path does not exist
# on the host.
ONLY_IN_NS = r"""
set -e
mount -t tmpfs tmpfs "$1"
cp "$2" "$1/dial9-demo"
exec "$1/dial9-demo" --workers 2 --mode mix --duration 0
"""


@test
def binary_only_inside_target_namespaces():
    hidden = tmpdir("d9hidden-")
    c = Container(["--pid", "--mount", "--fork", "--mount-proc"], ONLY_IN_NS, hidden, DEMO_FP)
    out = tmpdir("d9out-ctr-")
    exe = os.path.join(hidden, "dial9-demo")
    try:
        assert not os.path.exists(exe), "the binary is visible on the host"
        assert os.readlink(f"/proc/{c.pid}/exe") == exe
        rc, err = tool(["--pid", c.pid, "--duration", 3, "--output", out, "--quiet"])
    finally:
        c.stop()
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    samples = read_samples(out)
    assert len(samples) >= 20, f"only {len(samples)} samples"
    n = named(samples)
    assert n >= 0.9 * len(samples), f"only {n}/{len(samples)} samples name a demo fn"
    assert {s["pid"] for s in samples} == {c.pid}, {s["pid"] for s in samples}
    ns_pids = {s["ns_pid"] for s in samples}
    assert ns_pids == {1}, f"ns_pid {ns_pids}: the demo is pid 1 of its namespace"
    assert all(s["ns_tid"] < 100 and s["ns_tid"] != s["tid"] for s in samples)
    mods = {f["module"] for s in samples for f in s["stack"]}
    assert exe in mods, mods
    return (f"host pid {c.pid}, ns_pid 1; {n}/{len(samples)} named; ns_tids "
            f"{sorted({s['ns_tid'] for s in samples})}")


# The tool and the demo in one new pid namespace; the tool is given the namespace's pid.
TOOL_IN_NS = r"""
"$1" --workers 2 --mode mix --duration 0 >"$2/demo.jsonl" 2>/dev/null &
D=$!
i=0
while [ ! -s "$2/demo.jsonl" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done
echo "$D" >"$2/inner_pid"
ls /proc/$D/task >"$2/inner_tids"
"$3" --pid $D --duration 3 --output "$2/out" --quiet --overhead-budget 100
echo $? >"$2/rc"
ls /proc/$D/task >>"$2/inner_tids"
kill $D
"""


@test
def tool_inside_pid_namespace():
    d = tmpdir("d9nstool-")
    path = os.path.join(d, "run.sh")
    with open(path, "w") as f:
        f.write(TOOL_IN_NS)
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", "sh", path, DEMO_FP, d,
                        TOOL], capture_output=True, text=True, timeout=60)
    with open(os.path.join(d, "rc")) as f:
        rc = int(f.read())
    assert rc == 0, f"tool exit {rc}: {r.stderr[-1500:]}"
    with open(os.path.join(d, "inner_pid")) as f:
        inner = int(f.read())
    with open(os.path.join(d, "inner_tids")) as f:
        tids = {int(t) for t in f.read().split()}
    out = os.path.join(d, "out")
    samples = read_samples(out)
    meta = read_metadata(out)
    assert inner < 10, f"the demo is pid {inner} in the new namespace"
    assert len(samples) >= 20, f"only {len(samples)} samples"
    assert named(samples) >= 0.9 * len(samples)
    assert {s["pid"] for s in samples} == {inner}, {s["pid"] for s in samples}
    assert {s["ns_pid"] for s in samples} == {inner}
    stids = {s["tid"] for s in samples}
    assert stids <= tids, f"sample tids {stids} not among the namespace's {sorted(tids)}"
    assert all(s["tid"] == s["ns_tid"] for s in samples)
    assert meta["target"]["pid"] == inner, meta["target"]
    return f"--pid {inner} inside; sample tids {sorted(stids)}; {len(samples)} samples"


# A container proper: pivot_root into a tmpfs with the host's /usr bound in, the binary on its
# own tmpfs at /app. Lazily unmounting /app afterwards leaves the mapping on a detached mount,
# shown in maps as "/dial9-demo", a path the container can then fill with anything.
PIVOT = r"""
set -e
R="$1/root"
mkdir -p "$R"
mount -t tmpfs tmpfs "$R"
mkdir -p "$R/usr" "$R/app" "$R/app2" "$R/old" "$R/proc" "$R/tmp"
mount --rbind /usr "$R/usr"
ln -s usr/lib "$R/lib"; ln -s usr/lib64 "$R/lib64"; ln -s usr/bin "$R/bin"
mount -t tmpfs tmpfs "$R/app"
cp "$2" "$R/app/dial9-demo"
cp "$2" "$R/app2/dial9-demo"
cd "$R"
pivot_root . old
mount -t proc proc /proc
umount -l /old
exec /app/dial9-demo --workers 2 --mode mix --duration 0
"""


@test
def container_symlinks_never_reach_host_files():
    base = tmpdir("d9pivot-")
    # A host file the container names by absolute path: a copy of the demo, so reading it
    # would symbolize the samples.
    host_file = os.path.join(base, "host-only-file")
    shutil.copy(DEMO_FP, host_file)
    c = Container(["--mount", "--pid", "--fork"], PIVOT, base, DEMO_FP)
    res = []
    try:
        c.in_ns(f"umount -l /app && ln -s {host_file} /dial9-demo")
        with open(f"/proc/{c.pid}/maps") as f:
            paths = {l.split()[-1] for l in f if "dial9-demo" in l}
        assert paths == {"/dial9-demo"}, paths

        def run(label):
            out = tmpdir(f"d9out-{label}-")
            t0 = time.time()
            # 3 s: a 2 s run has one whole sampled epoch at most after the calibrating one, and
            # yields 7-48 samples, sometimes too few for the check below.
            rc, err = tool(["--pid", c.pid, "--duration", 3, "--output", out, "--quiet"],
                           wrap=NO_SYS_ADMIN, timeout=30)
            assert rc == 0, f"{label}: exit {rc}: {err[-1500:]}"
            samples = read_samples(out)
            assert len(samples) >= 10, f"{label}: only {len(samples)} samples"
            exe_frames = [f for s in samples for f in s["stack"] if f["module"] == "/dial9-demo"]
            assert exe_frames, f"{label}: no frames in the executable"
            res.append(f"{label}: {named(samples)}/{len(samples)} named in {time.time() - t0:.1f}s")
            return samples, exe_frames

        # 1. The symlink names a host path: resolved inside the container it names nothing.
        samples, frames = run("to-host")
        assert not any(f["name"] for f in frames), \
            "symbols read through a symlink to a host file"
        # 2. The same absolute symlink to a file inside the container: followed there.
        c.in_ns("rm /dial9-demo && ln -s /app2/dial9-demo /dial9-demo")
        samples, frames = run("in-root")
        assert named(samples) >= 0.9 * len(samples), res[-1]
        # 3. A FIFO: must not block the tool.
        c.in_ns("rm /dial9-demo && mkfifo /fifo && ln -s /fifo /dial9-demo")
        samples, frames = run("fifo")
        assert not any(f["name"] for f in frames)
    finally:
        c.stop()
    return "; ".join(res)


if __name__ == "__main__":
    raise SystemExit(run_all())
