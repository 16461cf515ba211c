#!/usr/bin/env python3
"""--push: intervals reach a loopback receiver written to Pyroscope's documented /ingest API
(multipart pprof), labelled, back to back, adding up to samples.jsonl; a receiver that is down,
answers 503 or never answers loses nothing, keeps the order and never slows sampling; a bad URL
or header is one line and exit 2. Every body is decoded with real parsers: the email package's
multipart parser, gzip, and `go tool pprof -raw`."""
import email.parser
import email.policy
import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
import http.server
from urllib.parse import parse_qs, urlparse

from harness import (TOOL, Demo, read_metadata, read_samples, remove_tmpdirs, run_all, run_tool,
                     test, tmpdir)

EVERY = 2  # --push-interval
_cache = {}


class Receiver:
    """A Pyroscope /ingest stand-in on 127.0.0.1. status(n) gives the answer to the n-th
    request (from 0); start=False leaves the port closed until up()."""

    def __init__(self, status=lambda n: 200, start=True):
        self.requests, self.answers, self.status = [], [], status
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.server = None
        if start:
            self.up()

    def up(self):
        rec = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                code = rec.status(len(rec.answers))
                rec.answers.append(code)
                if code == 200:
                    rec.requests.append((self.path, dict(self.headers), body, time.time()))
                self.send_response(code)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def close(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()


def pprof_raw(path):
    """`go tool pprof -raw` output, with caches in a temp dir and no network."""
    if "gohome" not in _cache:
        _cache["gohome"] = tmpdir("d9go-")
    home = _cache["gohome"]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "GOCACHE": os.path.join(home, "cache"), "GOPATH": os.path.join(home, "gopath"),
           "PPROF_TMPDIR": os.path.join(home, "pprof"), "PPROF_BINARY_PATH": home,
           "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9"}
    p = subprocess.run(["go", "tool", "pprof", "-raw", path], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, f"go tool pprof -raw {path}: {p.stderr[-800:]}"
    return p.stdout


def decode(req, outdir):
    """One request: its query, its multipart parts (decoded), and the profile's sample types,
    per-sample labels and value totals from go tool pprof."""
    path, headers, body, _ = req
    u = urlparse(path)
    assert u.path == "/ingest", u.path
    q = {k: v[0] for k, v in parse_qs(u.query).items()}
    ctype = headers["Content-Type"]
    assert ctype.startswith("multipart/form-data; boundary="), ctype
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body)
    parts = {p.get_param("name", header="content-disposition"): p.get_payload(decode=True)
             for p in msg.iter_parts()}
    assert set(parts) == {"profile", "sample_type_config"}, list(parts)
    raw = gzip.decompress(parts["profile"])  # a gzip stream, as pprof readers expect
    assert raw, "empty profile"
    f = os.path.join(outdir, f"pushed-{q['from']}.pb.gz")
    with open(f, "wb") as fh:
        fh.write(parts["profile"])
    text = pprof_raw(f)
    samples = text.split("Samples:\n", 1)[1].split("Locations", 1)[0]
    totals = [0, 0, 0]
    for m in re.finditer(r"^\s+(\d+)\s+(\d+)\s+(\d+):", samples, re.M):
        totals = [t + int(v) for t, v in zip(totals, m.groups())]
    types, labels = samples.splitlines()[0], set(re.findall(r"(\w+):\[", samples))
    return q, json.loads(parts["sample_type_config"]), types, totals, labels


def run_push(rec, duration=7, extra=(), sigterm_after=None):
    """One push run at 50 samples a worker-second against the shared demo, ended by its
    duration or by SIGTERM after sigterm_after seconds; returns (out, rc, stderr)."""
    out = tmpdir("d9push-")
    rc, _, err = run_tool("--pid", demo().pid, "--duration", duration, "--output", out,
                          "--per-worker-hz", 50, "--format", "jsonl", "--quiet",
                          "--push", rec.url(), "--push-interval", EVERY, *extra, timeout=60,
                          input_signal=signal.SIGTERM, signal_after=sigterm_after)
    return out, rc, err


def demo():
    if "demo" not in _cache:
        _cache["demo"] = Demo(workers=2, mode="mix")
        _cache["demo"].wait_seconds(1)
    return _cache["demo"]


def check_in_order(reqs, meta):
    """The pushed intervals: [from, until) back to back, arriving in order, as many as the
    run made; returns the queries."""
    qs = [{k: v[0] for k, v in parse_qs(urlparse(r[0]).query).items()} for r in reqs]
    spans = [(int(q["from"]), int(q["until"])) for q in qs]
    assert all(u > f for f, u in spans), spans
    for (f0, u0), (f1, u1) in zip(spans, spans[1:]):
        assert f1 == u0, f"not back to back or out of order: {spans}"
    assert len(spans) == meta["push"]["intervals"] == meta["push"]["sent"], \
        (spans, meta["push"])
    return qs


@test
def pushes_every_interval_labelled_and_adding_up():
    rec = Receiver()
    try:
        out, rc, err = run_push(rec, extra=("--label", "env=test", "--push-header",
                                            "X-Scope-OrgID: tenant-a", "--cpu-hz", "19"))
    finally:
        rec.close()
    assert rc == 0, err[-1500:]
    meta = read_metadata(out)
    qs = check_in_order(rec.requests, meta)
    d = demo()
    want_name = f"demo-fp{{host={socket.gethostname()},pid={d.pid},env=test}}"
    got_pprof = [0, 0, 0]
    for req, q in zip(rec.requests, qs):
        assert q["name"] == want_name and q["format"] == "pprof", q
        assert req[1].get("X-Scope-OrgID") == "tenant-a", req[1]
        _, stc, types, totals, labels = decode(req, out)
        assert set(stc) == {"resumes", "idle", "cpu"}, stc
        assert re.fullmatch(r"resumes/count(\[dflt\])? idle/nanoseconds cpu/nanoseconds",
                            types), types
        assert labels <= {"worker"}, f"series-splitting labels pushed: {labels}"
        got_pprof = [a + b for a, b in zip(got_pprof, totals)]
    # Every interval but the first and last is a whole --push-interval, pushed about once per
    # interval (after the interval's samples are in).
    mids = [int(q["until"]) - int(q["from"]) for q in qs[1:-1]]
    assert mids and all(m == EVERY for m in mids), mids
    # The end of the run closes the last two together.
    arrivals = [r[3] for r in rec.requests[:-2]]
    gaps = [b - a for a, b in zip(arrivals, arrivals[1:])]
    assert all(0.5 * EVERY < g < 2 * EVERY for g in gaps[1:]), gaps
    samples = read_samples(out, kind=None)
    want = [sum(s["weight_count"] for s in samples), sum(s["weight_idle_ns"] for s in samples),
            sum(s["weight_cpu_ns"] for s in samples)]
    assert got_pprof == want and want[0] > 0 and want[2] > 0, \
        f"pushed {got_pprof} != samples.jsonl {want}"
    assert meta["push"]["samples"] == len(samples), (meta["push"]["samples"], len(samples))
    return f"{len(qs)} intervals, {len(samples)} samples, resumes {want[0]} pushed and local"


@test
def receiver_down_then_up_loses_nothing():
    rec = Receiver(start=False)
    timer = threading.Timer(2 * EVERY + 3.0, rec.up)  # about two intervals after the start
    timer.start()
    try:
        out, rc, err = run_push(rec, duration=9)
    finally:
        timer.cancel()
        rec.close()
    assert rc == 0, err[-1500:]
    meta = read_metadata(out)
    p = meta["push"]
    check_in_order(rec.requests, meta)
    assert p["retries"] >= 1 and p["spooled"] >= 1 and p["sent_from_spool"] >= 1, p
    assert p["spool_pending"] == 0 and p["dropped_spool_full"] == 0, p
    assert "retrying with backoff" in err, err[-800:]
    samples = read_samples(out, kind=None)
    pushed = sum(decode(r, out)[3][0] for r in rec.requests)
    assert pushed == sum(s["weight_count"] for s in samples), "weights lost in the outage"
    return f"{p['intervals']} intervals, {p['spooled']} spooled, all sent in order"


@test
def answers_503_then_200():
    rec = Receiver(status=lambda n: 503 if n < 3 else 200)
    try:
        out, rc, err = run_push(rec, duration=6)
    finally:
        rec.close()
    assert rc == 0, err[-1500:]
    meta = read_metadata(out)
    p = meta["push"]
    check_in_order(rec.requests, meta)
    assert rec.answers[:3] == [503] * 3 and p["retries"] == 3, (rec.answers, p)
    assert p["dropped_rejected"] == 0 and p["spool_pending"] == 0, p
    return f"3 x 503, then {p['sent']} intervals in order"


@test
def rejected_4xx_dropped_with_one_line():
    rec = Receiver(status=lambda n: 400 if n == 0 else 200)
    try:
        out, rc, err = run_push(rec, duration=5)
    finally:
        rec.close()
    assert rc == 0, err[-1500:]
    p = read_metadata(out)["push"]
    assert p["dropped_rejected"] == 1 and p["sent"] == p["intervals"] - 1, p
    assert err.count("refused an interval") == 1, err[-800:]


def park_samples_per_worker_s(out):
    """Park samples per worker-second over the epochs that sampled (not calibrating, complete),
    after checking that the reader never stalled: no ring-buffer drops and samples in every
    second of the run. Park samples only: their rate is the per-worker budget's, while on-CPU
    samples follow how busy the workers happen to be."""
    meta = read_metadata(out)
    assert meta["counters"]["ring_buffer_drops"] == 0, meta["counters"]
    park = read_samples(out)
    secs = {s["epoch"] for s in park}
    missing = set(range(min(secs), max(secs) + 1)) - secs
    assert not missing, f"seconds without samples: {sorted(missing)}"
    full = {(w["worker"], e["epoch"]) for w in meta["workers"] for e in w["epochs"]
            if e["complete"] and not e["calibrating"]}
    assert full, meta["workers"]
    return sum((s["worker"], s["epoch"]) in full for s in park) / len(full)


@test
def receiver_never_answering_stalls_nothing():
    """Accepts connections and never replies: sampling keeps its rate, SIGTERM's exit waits a
    bounded time, says what was left, and what was not sent is in the spool, bounded."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    spool = tmpdir("d9push-spool-")
    rec = type("R", (), {"url": lambda self: f"http://127.0.0.1:{srv.getsockname()[1]}"})()
    t0 = time.time()
    try:
        out, rc, err = run_push(rec, duration=0, sigterm_after=7,
                                extra=("--spool-dir", spool, "--spool-mb", 1))
    finally:
        stop.set()
        t.join()
        for c in held:
            c.close()
        srv.close()
    took = time.time() - t0
    assert rc == 0, err[-1500:]
    assert took < 7 + 5 + 5, f"exit took {took:.1f}s: the flush is not bounded"
    meta = read_metadata(out)
    p = meta["push"]
    assert meta["stop_reason"] == "sigterm", meta["stop_reason"]
    line = [ln for ln in err.splitlines() if "dial9-bpf: push:" in ln and "intervals to" in ln]
    assert len(line) == 1 and f"0 sent (0 from the spool), {p['intervals']} left in {spool}" \
        in line[0], err[-800:]
    files = [f for f in os.listdir(spool) if f.endswith(".req")]
    assert p["sent"] == 0 and p["spool_pending"] == len(files) == p["intervals"], (p, files)
    size = sum(os.path.getsize(os.path.join(spool, f)) for f in files)
    assert size == p["spool_bytes"] <= 1 << 20, (size, p)
    rate = park_samples_per_worker_s(out)
    # The budget is 50 a worker-second; a reader stalled by the push would fall short of it.
    # On failure, each worker-epoch's eligible/selected/p says whether the reader lost samples
    # or an epoch's p was set from a starved epoch before it.
    epochs = [(e["epoch"] % 100, e["eligible"], e["selected"], round(e["probability"], 5),
               "capped" if e["capped"] else "") for w in meta["workers"] for e in w["epochs"]]
    assert 40 < rate < 60, f"{rate:.1f} park samples a worker-second for a budget of 50: {epochs}"
    return f"{rate:.1f} park samples a worker-second (budget 50); {len(files)} spooled"


@test
def bad_url_or_header_one_line_exit_2():
    cases = [("--push", "ftp://host"), ("--push", "not a url"),
             ("--push", "http://h:4040", "--push-header", "NoColon"),
             ("--push", "http://h:4040", "--label", "bad key=v")]
    for args in cases:
        p = subprocess.run([TOOL, "--pid", str(os.getpid()), *args], capture_output=True,
                           text=True, timeout=10)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (args, p.returncode, p.stderr)
        assert "invalid --" in lines[0], lines


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        if "demo" in _cache:
            _cache["demo"].stop()
            shutil.rmtree(_cache["demo"].dir, ignore_errors=True)
        remove_tmpdirs()
    raise SystemExit(rc)
