#!/usr/bin/env python3
"""Root-safe outputs, against the real tool run as root and a real unprivileged user.

The tool runs as root and writes into a directory a user names. Whatever another user plants
there (symlinks, hard links, FIFOs named like every output and temporary file) must not make
root write outside it, hang it, or leave a half-written file; a directory others could swap
files in is refused with one line; through sudo the outputs belong to the invoking user, who
can read them with `dial9-bpf report` without root; after setup every thread of the tool holds
only the capabilities its sampling loop uses.
"""
import os
import pwd
import stat
import subprocess
import time

from harness import TOOL, Demo, read_metadata, run_all, run_tool, test, tmpdir

USER = "d9-unpriv"
OUTPUTS = ["samples.jsonl", "stacks.jsonl", "long_polls.jsonl", "metadata.json", "perf.data",
           "perf-tasks.elf", "profile.pb.gz", "stacks.folded", "flamegraph.svg"]
IN_PLACE = ("samples.jsonl", "stacks.jsonl", "long_polls.jsonl")
# What the sampling loop may keep (user/util/privs.c); everything else must be gone.
LOOP_CAPS = {"cap_bpf", "cap_perfmon", "cap_sys_ptrace", "cap_checkpoint_restore",
             "cap_dac_read_search", "cap_dac_override", "cap_fowner", "cap_chown"}
CAP_NUMBERS = {"cap_chown": 0, "cap_dac_override": 1, "cap_dac_read_search": 2,
               "cap_fowner": 3, "cap_sys_ptrace": 19, "cap_perfmon": 38, "cap_bpf": 39,
               "cap_checkpoint_restore": 40}


def unpriv_uid():
    try:
        return pwd.getpwnam(USER).pw_uid
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                        "/usr/sbin/nologin", USER], check=True)
        return pwd.getpwnam(USER).pw_uid


def as_user(uid, script):
    """Runs a Python snippet as the unprivileged user."""
    subprocess.run(["setpriv", "--reuid", str(uid), "--regid", str(uid), "--clear-groups",
                    "--inh-caps=-all", "python3", "-c", script], check=True, timeout=30)


def snapshot(path):
    st = os.stat(path)
    with open(path, "rb") as f:
        return f.read(), st.st_mtime_ns, st.st_ino


_demo = []


def demo():
    if not _demo or not _demo[0].alive():
        _demo[:] = [Demo(workers=2)]
    return _demo[0]


def make_dir(parent, name, mode, owner=None):
    path = os.path.join(parent, name)
    os.mkdir(path)
    os.chmod(path, mode)  # whatever the umask
    if owner is not None:
        os.chown(path, owner, owner)
    return path


def record(out, *extra, env=None):
    return run_tool("--pid", demo().pid, "--duration", 2, "--output", out, *extra, env=env,
                    timeout=90)


@test
def planted_links_fifos_in_sticky_dir():
    uid = unpriv_uid()
    top = tmpdir("d9-rootsafe-")
    os.chmod(top, 0o755)
    # Like /tmp: anyone may create files there, only their owners remove them.
    shared = make_dir(top, "shared", 0o1777)
    root_victim = os.path.join(top, "root-victim")
    with open(root_victim, "w") as f:
        f.write("root's file\n")
    user_home = make_dir(top, "user-home", 0o755, owner=uid)
    user_victim = os.path.join(user_home, "victim")
    names = [n for o in OUTPUTS for n in (o, o + ".tmp")]
    # Every name gets each kind in turn: symlink to root's file, hard link to the user's own
    # file (the kernel lets a user hard-link only files it owns), a FIFO.
    as_user(uid, f"""
import os
open({user_victim!r}, "w").write("user's file\\n")
for i, n in enumerate({names!r}):
    p = os.path.join({shared!r}, n)
    k = i % 3
    if k == 0:
        os.symlink({root_victim!r}, p)
    elif k == 1:
        os.link({user_victim!r}, p)
    else:
        os.mkfifo(p)
""")
    before = {p: snapshot(p) for p in (root_victim, user_victim)}
    t0 = time.time()
    rc, _, err = record(shared)
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    for p, snap in before.items():
        assert snapshot(p) == snap, f"{p} was written through a planted name"
    for o in OUTPUTS:
        st = os.lstat(os.path.join(shared, o))
        assert stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == 0, (o, st)
        # samples.jsonl, stacks.jsonl and long_polls.jsonl are written in place: their planted .tmp are the
        # user's, left alone.
        if o not in IN_PLACE:
            assert not os.path.lexists(os.path.join(shared, o + ".tmp")), o + ".tmp left"
    meta = read_metadata(shared)
    assert meta["samples"]["written"] > 0
    return f"{len(names)} planted names replaced, victims unchanged, {time.time() - t0:.1f}s"


@test
def unsafe_output_dirs_refused():
    uid = unpriv_uid()
    top = tmpdir("d9-rootsafe-")
    os.chmod(top, 0o1777)
    elsewhere = make_dir(top, "elsewhere", 0o755)
    cases = []
    # A symlink another user planted where the output directory should be.
    link = os.path.join(top, "out-link")
    as_user(uid, f"import os; os.symlink({elsewhere!r}, {link!r})")
    cases.append((link, "symlink made by uid"))
    owned = make_dir(top, "owned", 0o755, owner=uid)
    cases.append((owned, f"belongs to uid {uid}"))
    open_dir = make_dir(top, "world", 0o777)
    cases.append((open_dir, "world-writable without the sticky bit"))
    group_dir = make_dir(top, "group", 0o775)
    cases.append((group_dir, "group-writable without the sticky bit"))
    for path, why in cases:
        rc, _, err = record(path)
        lines = [l for l in err.splitlines() if l.strip()]
        assert rc == 1, f"{path}: exit {rc}: {err[-800:]}"
        assert len(lines) == 1 and why in lines[0] and path in lines[0], (path, err)
        assert "--output" in lines[0] or "chown" in lines[0] or "chmod" in lines[0], lines
    assert os.listdir(elsewhere) == [], os.listdir(elsewhere)
    for path in (owned, open_dir, group_dir):
        assert os.listdir(path) == [], f"{path}: {os.listdir(path)}"
    return f"{len(cases)} refused with one line each"


@test
def lock_file_never_written_through():
    uid = unpriv_uid()
    top = tmpdir("d9-rootsafe-")
    os.chmod(top, 0o755)
    locks = make_dir(top, "locks", 0o1777)
    user_home = make_dir(top, "user-home", 0o755, owner=uid)
    victim = os.path.join(user_home, "victim")
    lock = os.path.join(locks, f"{demo().pid}.lock")
    as_user(uid, f"""
import os
open({victim!r}, "w").write("user's file\\n")
os.link({victim!r}, {lock!r})
""")
    before = snapshot(victim)
    out = os.path.join(top, "out")
    rc, _, err = record(out, env=dict(os.environ, DIAL9_LOCK_DIR=locks))
    assert rc == 0, err[-1000:]
    assert snapshot(victim) == before, "the lock file was written through a planted hard link"
    assert not os.path.lexists(lock), "lock file left behind"
    unsafe = make_dir(top, "open-locks", 0o777)
    rc, _, err = record(os.path.join(top, "out2"), env=dict(os.environ, DIAL9_LOCK_DIR=unsafe))
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 1 and len(lines) == 1 and "lock directory" in lines[0] and unsafe in lines[0], err
    assert not os.path.exists(os.path.join(top, "out2"))


@test
def second_run_replaces_first():
    out = os.path.join(tmpdir("d9-rootsafe-"), "run")
    rc, _, err = record(out)
    assert rc == 0, err[-1000:]
    # Hard links keep the first run's files (and their inodes) alive beside the directory.
    first = {}
    for o in OUTPUTS:
        keep = os.path.join(os.path.dirname(out), "first-" + o)
        os.link(os.path.join(out, o), keep)
        first[o] = snapshot(keep)
    rc, _, err = record(out)
    assert rc == 0, err[-1000:]
    for o in OUTPUTS:
        keep = os.path.join(os.path.dirname(out), "first-" + o)
        assert snapshot(keep) == first[o], f"the second run wrote into the first run's {o}"
        assert os.stat(os.path.join(out, o)).st_ino != first[o][2], f"{o} written in place"
    assert read_metadata(out)["sampling_started_at_ns"] != 0
    assert sorted(os.listdir(out)) == sorted(OUTPUTS), os.listdir(out)


@test
def sudo_user_owns_outputs_and_reports_without_root():
    uid = unpriv_uid()
    top = tmpdir("d9-rootsafe-")
    os.chmod(top, 0o755)
    out = os.path.join(top, "mine")
    env = dict(os.environ, SUDO_UID=str(uid), SUDO_GID=str(uid), SUDO_USER=USER)
    rc, _, err = record(out, env=env)
    assert rc == 0, err[-1000:]
    for p in [out] + [os.path.join(out, o) for o in OUTPUTS]:
        st = os.stat(p)
        assert (st.st_uid, st.st_gid) == (uid, uid), (p, st.st_uid, st.st_gid)
    meta = read_metadata(out)
    assert meta["privileges"]["outputs_owner"] == {"uid": uid, "gid": uid}, meta["privileges"]
    rc, rep, err = run_tool("report", out, user=uid)
    assert rc == 0, f"report as uid {uid}: exit {rc}: {err[-800:]}"
    assert "worker" in rep.lower(), rep[:500]


def cap_set(status, field):
    for line in status.splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1], 16)
    raise AssertionError(f"no {field} in status")


@test
def loop_keeps_only_its_capabilities():
    out = os.path.join(tmpdir("d9-rootsafe-"), "caps")
    p = subprocess.Popen([TOOL, "--pid", str(demo().pid), "--duration", "6", "--output", out],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    allowed = sum(1 << CAP_NUMBERS[c] for c in LOOP_CAPS)
    seen = {}
    deadline = time.time() + 5
    time.sleep(3)  # setup done, windows running
    while time.time() < deadline and not seen:
        for tid in os.listdir(f"/proc/{p.pid}/task"):
            try:
                with open(f"/proc/{p.pid}/task/{tid}/status") as f:
                    status = f.read()
            except OSError:
                continue
            seen[tid] = (cap_set(status, "CapEff"), cap_set(status, "CapBnd"),
                         cap_set(status, "NoNewPrivs"))
    _, err = p.communicate(timeout=60)
    assert p.returncode == 0, err[-1000:]
    assert seen, "no thread of the tool seen"
    for tid, (eff, bnd, nnp) in seen.items():
        assert eff & ~allowed == 0, f"thread {tid} holds CapEff {eff:#x}"
        assert bnd & ~allowed == 0, f"thread {tid} keeps CapBnd {bnd:#x}"
        assert nnp == 1, f"thread {tid} without no_new_privs"
    kept = set(read_metadata(out)["privileges"]["loop_capabilities"])
    assert kept <= LOOP_CAPS and {"cap_bpf", "cap_perfmon"} <= kept, kept
    return f"{len(seen)} threads, loop keeps {sorted(kept)}"


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        for d in _demo:
            d.stop()
    raise SystemExit(rc)
