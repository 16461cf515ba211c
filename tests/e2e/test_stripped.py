#!/usr/bin/env python3
"""Stripped binaries: the demo stripped with its symbols in a separate debug file, found by
each of the four ways (--symbols, the build-id tree, .gnu_debuglink, a debuginfod server), and
the refusals: a debug file of another build, nothing found, an unreachable debuginfod.

One stripped copy of demo-nofp runs for the whole file; every case profiles that process."""
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(__file__))
from harness import (DEMO_FNS, DEMO_FP, DEMO_NOFP, Demo, read_metadata, read_samples,  # noqa: E402
                     run_all, run_tool, test, tmpdir)

DURATION = "3"
NAMED_MIN = 0.95
# A stripped run names about as many samples as the unstripped binary does.
NAMED_SLACK = 0.03

_state = {}


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def build_id(path):
    out = subprocess.run(["readelf", "-n", path], check=True, capture_output=True,
                         text=True).stdout
    return next(l.split()[-1] for l in out.splitlines() if "Build ID:" in l)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup():
    """The stripped copy (bin/app, with a .gnu_debuglink to app.debug), its debug file in
    dbg/, a build-id tree holding it, an empty debug directory, and the demo running it."""
    if _state:
        return _state
    d = tmpdir("d9stripped-")
    for sub in ("bin", "dbg", "tree", "empty", "other", "cache"):
        os.mkdir(os.path.join(d, sub))
    app, dbg = os.path.join(d, "bin", "app"), os.path.join(d, "dbg", "app.debug")
    sh("objcopy", "--only-keep-debug", DEMO_NOFP, dbg)
    sh("strip", "--strip-all", "-o", app, DEMO_NOFP)
    # objcopy records the debug file's base name and CRC; the file may then live elsewhere.
    sh("objcopy", "--add-gnu-debuglink=" + dbg, app)
    bid = build_id(app)
    assert bid == build_id(dbg), "the debug file's build id differs from the binary's"
    os.makedirs(os.path.join(d, "tree", ".build-id", bid[:2]))
    shutil.copy(dbg, os.path.join(d, "tree", ".build-id", bid[:2], bid[2:] + ".debug"))
    sh("objcopy", "--only-keep-debug", DEMO_FP, os.path.join(d, "other", "app.debug"))
    _state.update(dir=d, app=app, dbg=dbg, build_id=bid,
                  demo=Demo(binary=app, workers=2, mode="mix"))
    return _state


def env(cache=None, **extra):
    """No debuginfod unless a case asks for one, and a client cache of our own."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("DEBUGINFOD_")}
    e["DEBUGINFOD_CACHE_PATH"] = cache or os.path.join(setup()["dir"], "cache")
    e.update(extra)
    return e


def profile(*args, pid=None, environ=None):
    s = setup()
    out = tmpdir("d9stripped-out-")
    rc, _, err = run_tool("--pid", pid or s["demo"].pid, "-d", DURATION, "-o", out, "-q",
                          "--format", "jsonl", *args, env=environ or env(), timeout=90)
    assert rc == 0, f"exit {rc}: {err[-1500:]}"
    return out, err


def named_share(out):
    samples = read_samples(out)
    assert len(samples) >= 20, f"only {len(samples)} samples"

    def named(s):
        names = [f["name"] or "" for f in s["stack"]] + [s.get("future") or ""]
        return any(fn in n for n in names for fn in DEMO_FNS)
    return sum(map(named, samples)) / len(samples), len(samples)


def baseline():
    """The unstripped binary's named share, measured once."""
    if "baseline" not in _state:
        d = Demo(binary=DEMO_NOFP, workers=2, mode="mix")
        try:
            out, _ = profile(pid=d.pid)
        finally:
            d.stop()
        _state["baseline"] = named_share(out)[0]
        assert read_metadata(out)["target"]["symbols"]["method"] == "symtab"
    return _state["baseline"]


def check_named(out, method, path=None):
    """Samples name the demo's async fns as the unstripped binary's do, task types are named,
    and metadata says where the symbols came from."""
    meta = read_metadata(out)
    sym = meta["target"]["symbols"]
    assert sym["method"] == method, f"symbols from {sym}, expected {method}"
    if path:
        assert os.path.realpath(sym["path"]) == os.path.realpath(path), \
            f"symbols from {sym['path']}, not {path}"
    share, n = named_share(out)
    base = baseline()
    assert share >= NAMED_MIN and share >= base - NAMED_SLACK, \
        f"{share:.3f} of {n} samples name a demo fn (unstripped: {base:.3f})"
    sampled = [t for t in meta["task_types"] if t["samples"]]
    unnamed = [t for t in sampled if t["named_by"] == "none"]
    assert sampled and not unnamed, f"task types sampled but unnamed: {unnamed}"
    return f"named {share:.3f} of {n} (unstripped {base:.3f}), {len(sampled)} task types named"


@test
def build_id_tree():
    """--debug-dir DIR: DIR/.build-id/xx/yyyy.debug."""
    s = setup()
    out, _ = profile("--debug-dir", os.path.join(s["dir"], "tree"))
    return check_named(out, "build_id_tree")


@test
def debuglink_beside_binary():
    """.gnu_debuglink: the debug file beside the binary, its CRC checked."""
    s = setup()
    beside = os.path.join(os.path.dirname(s["app"]), "app.debug")
    shutil.copy(s["dbg"], beside)
    try:
        out, _ = profile("--debug-dir", os.path.join(s["dir"], "empty"))
    finally:
        os.unlink(beside)
    return check_named(out, "debuglink", beside)


@test
def symbols_file():
    """--symbols FILE."""
    s = setup()
    out, _ = profile("--symbols", s["dbg"])
    return check_named(out, "symbols_option", s["dbg"])


def wait_served(url, p, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert p.poll() is None, "debuginfod exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"debuginfod did not serve {url} within {timeout} s")


@test
def debuginfod_server():
    """A debuginfod server (Debian's debuginfod scanning a directory) on a free port: the
    file comes through libdebuginfod into DEBUGINFOD_CACHE_PATH."""
    s = setup()
    port = free_port()
    db = os.path.join(tmpdir("d9debuginfod-db-"), "db.sqlite")
    log = open(os.path.join(s["dir"], "debuginfod.log"), "w")
    p = subprocess.Popen(["debuginfod", "-F", "-p", str(port), "-d", db, "-t", "0", "-g", "0",
                          os.path.join(s["dir"], "dbg")], stdout=log, stderr=log,
                         start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_served(f"{url}/buildid/{s['build_id']}/debuginfo", p)
        out, _ = profile("--debug-dir", os.path.join(s["dir"], "empty"),
                         environ=env(DEBUGINFOD_URLS=url))
    finally:
        p.terminate()
        p.wait(10)
        log.close()
    meta = read_metadata(out)
    cached = meta["target"]["symbols"]["path"]
    assert cached.startswith(os.path.join(s["dir"], "cache")), f"not in the cache: {cached}"
    detail = check_named(out, "debuginfod")
    # The server is gone: the client's cache answers.
    again, _ = profile("--debug-dir", os.path.join(s["dir"], "empty"),
                       environ=env(DEBUGINFOD_URLS=url))
    meta2 = read_metadata(again)
    assert meta2["target"]["symbols"]["path"] == cached, meta2["target"]["symbols"]
    return detail + f"; fetched in {meta['target']['symbols']['search_ms']:.0f} ms, " \
        f"from the cache in {meta2['target']['symbols']['search_ms']:.0f} ms"


def refused(*args, environ=None, timeout=60):
    s = setup()
    out = os.path.join(tmpdir("d9stripped-out-"), "out")
    t0 = time.time()
    rc, _, err = run_tool("--pid", s["demo"].pid, "-d", DURATION, "-o", out, *args,
                          env=environ or env(), timeout=timeout)
    lines = [l for l in err.splitlines() if l.strip()]
    assert rc == 1, f"exit {rc}: {err[-800:]}"
    assert len(lines) == 1, f"{len(lines)} lines on stderr: {err[-1500:]}"
    assert not os.path.exists(out), "output written by a refused run"
    return lines[0], time.time() - t0


@test
def other_build_refused():
    """The debug file of another build (demo-fp's, for demo-nofp) is refused by build id."""
    s = setup()
    line, _ = refused("--symbols", os.path.join(s["dir"], "other", "app.debug"))
    assert "another build" in line and s["build_id"] in line, line
    return line


@test
def nothing_found():
    """No debug file anywhere: the one line names all four ways."""
    s = setup()
    line, _ = refused("--debug-dir", os.path.join(s["dir"], "empty"))
    for way in ("--symbols", "--debug-dir", ".gnu_debuglink", "DEBUGINFOD_URLS"):
        assert way in line, f"'{way}' not in: {line}"
    return line


@test
def debuginfod_unreachable():
    """A closed port, then a server that accepts and never answers: each a bounded wait and
    one line saying what debuginfod did."""
    s = setup()
    empty = os.path.join(s["dir"], "empty")
    cache = tmpdir("d9debuginfod-cache-")
    line, secs = refused("--debug-dir", empty,
                         environ=env(cache, DEBUGINFOD_URLS=f"http://127.0.0.1:{free_port()}"))
    assert "debuginfod" in line and secs < 15, f"{secs:.1f} s: {line}"
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        url = f"http://127.0.0.1:{mute.getsockname()[1]}"
        line2, secs2 = refused("--debug-dir", empty,
                               environ=env(cache, DEBUGINFOD_URLS=url, DEBUGINFOD_TIMEOUT="3"))
    assert "timed out" in line2 and secs2 < 15, f"{secs2:.1f} s: {line2}"
    return f"closed port: {secs:.1f} s; silent server: {secs2:.1f} s: {line2}"


def cgroup2_mount():
    with open("/proc/self/mounts") as f:
        return next(l.split()[1] for l in f if l.split()[2] == "cgroup2")


@test
def cgroup_supervisor():
    """--cgroup passes --debug-dir to each child; without it, the stripped demo is skipped
    with a line naming the ways to give its debug file."""
    s = setup()
    cg = os.path.join(cgroup2_mount(), "d9stripped-" + str(os.getpid()))
    os.mkdir(cg)
    p = subprocess.Popen(["sh", "-c", 'echo $$ >"$0" && exec "$@"',
                          os.path.join(cg, "cgroup.procs"), s["app"], "--workers", "1",
                          "--mode", "mix", "--duration", "0"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        time.sleep(1)
        out = os.path.join(tmpdir("d9stripped-cg-"), "run")
        # Longer than the --pid runs: the child is found and attached after the supervisor's
        # own start, and a one-worker child gives ~10 park samples a second after that.
        rc, _, err = run_tool("--cgroup", cg, "-d", "5", "-o", out, "-q", "--format",
                              "jsonl", "--debug-dir", os.path.join(s["dir"], "tree"),
                              env=env(), timeout=60)
        assert rc == 0, f"exit {rc}: {err[-1500:]}"
        share, n = named_share(os.path.join(out, f"pid-{p.pid}"))
        assert share >= NAMED_MIN, f"{share:.3f} of {n} samples named"
        out2 = os.path.join(tmpdir("d9stripped-cg-"), "run")
        rc, _, err = run_tool("--cgroup", cg, "-d", "1", "-o", out2, "-q", "--debug-dir",
                              os.path.join(s["dir"], "empty"), env=env(), timeout=60)
        assert "stripped" in err and "DEBUGINFOD_URLS" in err, err[-1500:]
        assert not os.path.exists(os.path.join(out2, f"pid-{p.pid}")), "profiled anyway"
    finally:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        for _ in range(50):
            try:
                os.rmdir(cg)
                break
            except OSError:
                time.sleep(0.1)
    return f"child named {share:.3f} of {n} samples; skipped without: {err.strip()[:160]}"


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        if "demo" in _state:
            _state["demo"].stop()
        from harness import remove_tmpdirs
        remove_tmpdirs()
    sys.exit(rc)
