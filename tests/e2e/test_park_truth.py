#!/usr/bin/env python3
"""Park truth: a sample names the leaf that returned Pending in its poll, the first of several,
never one that returned Ready. Workloads from tools/parktruth, which count their own truth."""
import json
import os
import shutil
import subprocess
import tempfile
import time

from harness import ROOT, read_metadata, read_samples, run_all, run_tool, test, tmpdir

PT_FP = os.path.join(ROOT, "build", "parktruth-fp")
PT_NOFP = os.path.join(ROOT, "build", "parktruth-nofp")


class ParkTruth:
    """A running dial9-parktruth; its start and end lines (ground truth) are kept."""

    def __init__(self, mode, duration, binary=PT_FP, tasks=16):
        self.dir = tmpdir("d9pt-")
        self.out_path = os.path.join(self.dir, "pt.jsonl")
        self.out = open(self.out_path, "w")
        self.proc = subprocess.Popen(
            [binary, "--mode", mode, "--duration", str(duration), "--tasks", str(tasks)],
            stdout=self.out, stderr=subprocess.DEVNULL, start_new_session=True)
        self.pid = self.proc.pid
        deadline = time.time() + 10
        while not self.line("start"):
            assert time.time() < deadline and self.proc.poll() is None, "parktruth did not start"
            time.sleep(0.05)
        self.start = self.line("start")

    def line(self, type_):
        with open(self.out_path) as f:
            for raw in f:
                try:
                    obj = json.loads(raw)
                except ValueError:
                    continue
                if obj.get("type") == type_:
                    return obj
        return None

    def finish(self):
        """Waits for the end and returns its ground-truth line."""
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.out.close()
        end = self.line("end")
        assert end, "parktruth wrote no end line"
        return end


def names(sample):
    return [f["name"] or "" for f in sample["stack"]]


def of_task(samples, fn):
    """Samples whose stack holds the async fn fn, with a stack."""
    return [s for s in samples if any(fn in n for n in names(s))]


def profile(pt, *args, duration=4, windows=False, env=None):
    out = tmpdir("d9pt-out-")
    rc, _, err = run_tool("--pid", pt.pid, "--duration", duration, "--output", out, *args,
                          timeout=duration + 60, windows=windows, env=env)
    assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
    return read_samples(out), read_metadata(out)


def share(part, whole):
    return len(part) / len(whole) if whole else 0.0


@test
def join_names_the_pending_receive():
    """join!(rx.recv() fed late, sem.acquire() ready at once): the receive, never the acquire
    (the last park point hit in those polls)."""
    pt = ParkTruth("join", 6)
    samples, _ = profile(pt, "--per-worker-hz", 20)
    truth = pt.finish()
    assert truth["join_rounds"] > 1000, truth
    mine = of_task(samples, "join_kind_task")
    assert len(mine) >= 20, f"only {len(mine)} samples of join_kind_task"
    recv = [s for s in mine if any("::recv" in n for n in names(s)[:3])]
    acquire = [s for s in mine if any("Acquire" in n for n in names(s)[:2])]
    assert not acquire, f"{len(acquire)} samples name the Ready acquire: {names(acquire[0])[:3]}"
    assert share(recv, mine) >= 0.95, f"{len(recv)}/{len(mine)} name the receive"
    return f"{len(recv)}/{len(mine)} name the receive, 0 the acquire"


@test
def handle_names_the_pending_join_handle():
    """join!(JoinHandle of a sleeping child, ready acquire): the JoinHandle, read from the
    joined task's state at its return; the child's own last poll (its Sleep returned Ready,
    with the timer's AtomicWaker registered inside it) names nothing."""
    pt = ParkTruth("handle", 6)
    samples, meta = profile(pt, "--per-worker-hz", 20)
    truth = pt.finish()
    assert truth["handle_rounds"] > 1000, truth
    mine = of_task(samples, "handle_kind_task")
    assert len(mine) >= 20, f"only {len(mine)} samples of handle_kind_task"
    handle = [s for s in mine if "JoinHandle" in names(s)[0]
              and s["park_decided"] == "returned_pending"]
    assert share(handle, mine) >= 0.95, \
        f"{len(handle)}/{len(mine)} name the JoinHandle: {[names(s)[:2] for s in mine][:3]}"
    jh = [p for p in meta["probes"]["symbols"] if "JoinHandle<u64>" in p["name"]]
    assert jh and jh[0]["seen_pending"] > 0 and jh[0]["seen_unexpected"] == 0, jh
    return f"{len(handle)}/{len(mine)} name the JoinHandle"


def select_check(env=None):
    pt = ParkTruth("select", 6)
    samples, meta = profile(pt, "--per-worker-hz", 20, env=env)
    truth = pt.finish()
    assert truth["select_sleep_fired"] > 100 and truth["select_notify_fired"] > 100, truth
    mine = of_task(samples, "select_kind_task")
    assert len(mine) >= 20, f"only {len(mine)} samples of select_kind_task"
    first = [s for s in mine if "Sleep" in names(s)[0] and s["park_decided"] ==
             "returned_pending" and s["also_pending"] >= 1]
    assert share(first, mine) >= 0.95, \
        f"{len(first)}/{len(mine)} name the sleep with also_pending >= 1: " \
        f"{[(names(s)[:1], s['also_pending']) for s in mine if s not in first][:3]}"
    return (f"{len(first)}/{len(mine)} name the sleep, also_pending >= 1; truth "
            f"{truth['select_sleep_fired']} sleeps, {truth['select_notify_fired']} notifies; "
            f"returns by {meta['probes']['park_returns']}")


@test
def select_names_the_first_pending():
    """biased select! of a sleep and a Notified, both Pending: the sleep (polled first) is
    named and the Notified counted in also_pending."""
    return select_check()


@test
def select_names_the_first_pending_uretprobe():
    """The same with a return probe on every call (kernels without uprobe sessions)."""
    return select_check(env=dict(os.environ, DIAL9_UPROBE_SESSION="0"))


_server_runs = {}


def server_run(binary, windows):
    """The TCP server under wrk; its connection tasks' samples, the metadata and the truth
    (one run per binary and mode, shared by the tests)."""
    if (binary, windows) not in _server_runs:
        _server_runs[(binary, windows)] = _server_run(binary, windows)
    return _server_runs[(binary, windows)]


def _server_run(binary, windows):
    assert shutil.which("wrk"), "wrk is missing: make deps installs it"
    pt = ParkTruth("server", 10, binary=binary, tasks=0)
    load = subprocess.Popen(["wrk", "-t1", "-c16", "-d8s",
                             f"http://127.0.0.1:{pt.start['port']}/"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        time.sleep(1)
        args = ["--per-worker-hz", 99] if windows else ["--per-worker-hz", 20]
        samples, meta = profile(pt, *args, duration=6, windows=windows)
    finally:
        out, _ = load.communicate(timeout=30)
    truth = pt.finish()
    assert truth["conn_requests"] > 1000, (truth, out[-500:])
    return of_task(samples, "conn_kind_task"), meta, truth


def check_read(mine, truth):
    assert len(mine) >= 15, f"only {len(mine)} connection-task samples"
    read = [s for s in mine if any("conn_read_request" in n for n in names(s))]
    flush = [s for s in mine if any("conn_flush_reply" in n for n in names(s))]
    assert share(read, mine) >= 0.90, \
        f"{len(read)}/{len(mine)} park in the read, {len(flush)} in the flush"
    return (f"{len(read)}/{len(mine)} in the read, {len(flush)} in the flush; truth: "
            f"{truth['conn_requests']} requests, {truth['conn_read_pending']} reads and "
            f"{truth['conn_write_pending']} writes Pending")


@test
def server_parks_in_the_read():
    """hyper-like connection tasks (read until Pending, then write and flush, Ready) under
    wrk, default armed windows: the samples park in the read."""
    mine, meta, truth = server_run(PT_FP, windows=True)
    return check_read(mine, truth)


@test
def server_parks_in_the_read_release_build():
    """The same, default release build (no frame pointers), always armed: stacks walked in
    BPF from the .eh_frame tables (auto's pick), starting in the leaf at its entry's
    registers."""
    mine, meta, truth = server_run(PT_NOFP, windows=False)
    assert meta["unwind"]["mode"] == "ebpf", meta["unwind"]
    return check_read(mine, truth)


@test
def metadata_says_how_outcomes_are_observed():
    """Each park point says how its outcome is observed; the server's reads were seen both
    Pending and Ready, with no unexpected value (the release build's always-armed run)."""
    _, meta, _ = server_run(PT_NOFP, windows=False)
    parks = {p["name"]: p for p in meta["probes"]["symbols"] if p["kind"] == "park"}
    assert parks and all("outcome" in p for p in parks.values()), parks
    by = {}
    for name, p in parks.items():
        for key in ("poll_ready", "Sleep", "Notified", "Acquire", "register_by_ref"):
            if key in name:
                by[key] = p
    assert by["poll_ready"]["outcome"].startswith("return value in memory"), by["poll_ready"]
    assert by["poll_ready"]["seen_pending"] > 0 and by["poll_ready"]["seen_ready"] > 0, \
        by["poll_ready"]
    assert all(p.get("seen_unexpected", 0) == 0 for p in parks.values()), parks
    assert by["Sleep"]["outcome"] == "return value in al", by["Sleep"]
    assert by["register_by_ref"]["outcome"].startswith("not observable"), by["register_by_ref"]
    assert meta["probes"]["park_returns"] in ("uprobe_session", "uretprobe"), meta["probes"]
    return "; ".join(f"{k}: {p['outcome']}" for k, p in sorted(by.items()))


if __name__ == "__main__":
    raise SystemExit(run_all())
