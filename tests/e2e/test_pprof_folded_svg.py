#!/usr/bin/env python3
"""perf-compatible outputs: profile.pb.gz, stacks.folded and flamegraph.svg agree with
samples.jsonl and open in their tools (go tool pprof, a folded-stacks parser, headless
chromium); an interrupted run leaves no truncated file under a final name."""
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import xml.etree.ElementTree as ET
import zlib

from harness import ALWAYS_ARMED, DEMO_NOFP, TOOL, Demo, read_metadata, read_samples, run_all, test, tmpdir

DEMO_FNS = ("cpu_kind_task", "timer_kind_task", "channel_kind_producer",
            "channel_kind_consumer")
# An async fn body, whatever the mangling: "{{closure}}" (legacy) or "{closure#0}" (v0).
ASYNC_FN = r"dial9_demo::%s::(?:\{\{closure\}\}|\{closure#\d+\})"
FORMATS = "jsonl,pprof,folded,flamegraph"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SHOT_COPY = "/tmp/flamegraph-shot.png"

_cache = {}



def profiled():
    """One 6 s run of the mix demo writing every format but perf."""
    if "run" not in _cache:
        d = Demo(workers=2, mode="mix")
        try:
            d.wait_seconds(1)
            out = tmpdir("d9out-fmt-")
            p = subprocess.run([TOOL, "--pid", str(d.pid), "--duration", "6", "--per-worker-hz",
                                "50", "--seed", "7", "--output", out, "--format", FORMATS,
                                *ALWAYS_ARMED],
                               capture_output=True, text=True, timeout=90)
        finally:
            d.stop()
        assert p.returncode == 0, f"dial9-bpf exited {p.returncode}: {p.stderr[-1500:]}"
        samples = read_samples(out)
        assert len(samples) >= 100, f"only {len(samples)} samples"
        _cache["run"] = (out, samples)
    return _cache["run"]


def pprof(*args):
    """go tool pprof with its caches in a temp dir and no way to reach the network."""
    home = _cache.get("gohome") or tmpdir("d9go-")
    _cache["gohome"] = home
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
           "GOCACHE": os.path.join(home, "cache"), "GOPATH": os.path.join(home, "gopath"),
           "PPROF_TMPDIR": os.path.join(home, "pprof"), "PPROF_BINARY_PATH": home,
           "GOPROXY": "off", "GOTOOLCHAIN": "local", "GOFLAGS": "",
           "http_proxy": "http://127.0.0.1:9", "https_proxy": "http://127.0.0.1:9",
           "no_proxy": ""}
    p = subprocess.run(["go", "tool", "pprof", *args], capture_output=True, text=True,
                       env=env, timeout=60)
    assert p.returncode == 0, f"go tool pprof {' '.join(args)}: {p.stderr[-1500:]}"
    return p.stdout, p.stderr


def raw_totals(path, *filters):
    """Sums of each sample value in `pprof -raw` (exact integers), after filters."""
    out, _ = pprof("-raw", *filters, path)
    body = out.split("Samples:", 1)[1].split("Locations", 1)[0]
    totals = None
    for line in body.splitlines():
        m = re.match(r"^\s+(\d+(?:\s+\d+)*):", line)
        if not m:
            continue
        vals = [int(v) for v in m.group(1).split()]
        totals = vals if totals is None else [a + b for a, b in zip(totals, vals)]
    return (totals or [0, 0])[:2]  # resumes and idle, the park samples' (cpu: test_oncpu.py)


def names(sample):
    return [f["name"] or "" for f in sample["stack"]]


def has_fn(sample, fn):
    """Whether the async fn body itself (not a generic naming it) is on the stack."""
    return any(re.fullmatch(ASYNC_FN % fn, n) for n in names(sample))


@test
def pprof_totals_match_jsonl():
    out, samples = profiled()
    path = os.path.join(out, "profile.pb.gz")
    want = [sum(s["weight_count"] for s in samples), sum(s["weight_idle_ns"] for s in samples)]
    got = raw_totals(path)
    assert got == want, f"pprof totals {got} != samples.jsonl {want}"
    top, err = pprof("-top", "-sample_index=resumes", path)
    assert "Type: resumes" in top, top[:800]
    m = re.search(r"of (\d+) total", top)
    assert m and int(m.group(1)) == want[0], f"-top total != {want[0]}: {top[:800]}"
    idle, _ = pprof("-top", "-sample_index=idle", "-unit=ns", path)
    m = re.search(r"of (\d+)ns total", idle)
    assert m and int(m.group(1)) == want[1], f"-top idle total != {want[1]}: {idle[:800]}"
    assert "symboliz" not in err.lower() and "fetch" not in err.lower(), err[:800]
    return f"{len(samples)} samples: resumes {want[0]}, idle {want[1]} ns in both"


@test
def pprof_names_demo_async_fns():
    out, samples = profiled()
    path = os.path.join(out, "profile.pb.gz")
    top, _ = pprof("-top", "-nodecount=1000", path)
    traces, _ = pprof("-traces", path)
    found = []
    for fn in DEMO_FNS:
        if not any(has_fn(s, fn) for s in samples):
            continue
        assert re.search(ASYNC_FN % fn, traces), f"-traces lacks {fn}"
        # -top's cum column of the async fn body == JSONL weights of stacks holding it.
        want = sum(s["weight_count"] for s in samples if has_fn(s, fn))
        line = next((l for l in top.splitlines() if len(l.split(None, 5)) == 6
                     and re.fullmatch(ASYNC_FN % fn, l.split(None, 5)[5])), None)
        assert line, f"-top lacks {fn}: {top[:1500]}"
        cum = int(line.split()[3])
        assert cum == want, f"{fn}: -top cum {cum} != JSONL {want}: {line}"
        found.append(f"{fn} {cum}")
    assert len(found) >= 3, f"only {found}"
    # Rust names reach pprof whole ("<T as Trait>::poll", not pprof's "::poll").
    assert re.search(r"<dial9_demo::Counted<.*> as core::future::future::Future>::poll", top), \
        top[:1500]
    assert "task_id:" in traces and "worker:" in traces and "park_point:" in traces
    return "; ".join(found)


# The future a demo task runs, in either mangling (Counted wraps every counted kind).
FUTURE = r"dial9_demo::Counted<dial9_demo::(\w+)::(?:\{\{closure\}\}|\{closure#\d+\})>"


@test
def task_root_names_each_future():
    """Every sample names its task's future (v0 mangling here: raw::poll's generics), and every
    view is rooted by it: "task: FUTURE" in folded, pprof and the flamegraph."""
    out, samples = profiled()
    named = [s for s in samples if s["future"] and re.fullmatch(FUTURE, s["future"])]
    assert len(named) == len(samples), \
        f"{len(samples) - len(named)} samples without a demo future: " \
        f"{[s['future'] for s in samples if s not in named][:5]}"
    # A line is "ROOT;FRAME;...;LEAF COUNT", or "ROOT COUNT" for a sample without a stack (a
    # poll that parked on nothing probed: docs/design.md, "Where a task parks").
    with open(os.path.join(out, "stacks.folded")) as f:
        roots = {line.rsplit(" ", 1)[0].split(";", 1)[0] for line in f}
    assert all(re.fullmatch("task: " + FUTURE, r) for r in roots), roots
    traces, _ = pprof("-traces", os.path.join(out, "profile.pb.gz"))
    assert re.search(r"task: " + FUTURE, traces), traces[:1500]
    with open(os.path.join(out, "flamegraph.svg")) as f:
        assert "task: dial9_demo::Counted&lt;" in f.read()
    types = read_metadata(out)["task_types"] if os.path.exists(
        os.path.join(out, "metadata.json")) else []
    return f"{len(samples)} samples, roots {sorted(r[6:60] for r in roots)}; {len(types)} types"


@test
def legacy_names_and_no_task_root():
    """A plain release build (legacy mangling: raw::poll has no generics) names futures by the
    drop glue its raw::dealloc calls; --no-task-root leaves the root frame out."""
    d = Demo(binary=DEMO_NOFP, workers=2, mode="mix")
    try:
        out = tmpdir("d9out-legacy-")
        p = subprocess.run([TOOL, "--pid", str(d.pid), "--duration", "3", "--output", out,
                            "--per-worker-hz", "50", "--format", "jsonl,folded",
                            "--no-task-root", *ALWAYS_ARMED],
                           capture_output=True, text=True, timeout=90)
    finally:
        d.stop()
    assert p.returncode == 0, p.stderr[-1500:]
    samples = read_samples(out)
    assert len(samples) >= 30, f"only {len(samples)} samples"
    named = [s for s in samples if s["future"] and re.fullmatch(FUTURE, s["future"])]
    assert len(named) == len(samples), [s["future"] for s in samples if s not in named][:5]
    meta = read_metadata(out)
    used = [t for t in meta["task_types"] if t["samples"]]
    assert used and all(t["named_by"] == "drop_glue" for t in used), used
    with open(os.path.join(out, "stacks.folded")) as f:
        assert not any(line.startswith("task: ") for line in f)
    return f"{len(samples)} samples named; {len(used)} types by drop glue"


@test
def pprof_tagfocus_worker():
    out, samples = profiled()
    path = os.path.join(out, "profile.pb.gz")
    res = []
    for w in sorted({s["worker"] for s in samples if s["worker"] >= 0}):
        want = [sum(s["weight_count"] for s in samples if s["worker"] == w),
                sum(s["weight_idle_ns"] for s in samples if s["worker"] == w)]
        got = raw_totals(path, f"-tagfocus=worker=^w{w}$")
        assert got == want, f"worker w{w}: pprof {got} != JSONL {want}"
        res.append(f"w{w} {want[0]}")
    assert res, "no worker"
    # A numeric task_id label: one task's total.
    s0 = next(s for s in samples if s["task_id"])
    want = sum(s["weight_count"] for s in samples if s["task_id"] == s0["task_id"])
    got = raw_totals(path, f"-tagfocus=task_id={s0['task_id']}")[0]
    assert got == want, f"task {s0['task_id']}: pprof {got} != JSONL {want}"
    return "; ".join(res) + f"; task {s0['task_id']} {want}"


@test
def pprof_mappings_have_build_ids():
    out, _ = profiled()
    raw, _ = pprof("-raw", os.path.join(out, "profile.pb.gz"))
    maps = raw.split("Mappings", 1)[1].strip().splitlines()
    first = maps[0].split()
    assert first[2].endswith("/build/demo-fp"), f"main binary not first: {maps}"
    assert re.fullmatch(r"[0-9a-f]{40}", first[3]), f"no build id: {maps[0]}"
    assert all(l.rstrip().endswith("[FN]") for l in maps), f"a mapping lacks has_functions: {maps}"
    return f"{len(maps)} mappings; {first[2]} {first[3]}"


@test
def folded_sums_and_parses():
    out, samples = profiled()
    total, lines, per_fn = 0, 0, {fn: 0 for fn in DEMO_FNS}
    with open(os.path.join(out, "stacks.folded")) as f:
        for line in f:
            m = re.fullmatch(r"(.+) (\d+)\n", line)
            assert m, f"bad line: {line!r}"
            frames = m.group(1).split(";")
            assert all(frames), f"empty frame: {line!r}"
            total += int(m.group(2))
            lines += 1
            for fn in DEMO_FNS:
                if any(re.fullmatch(ASYNC_FN % fn, fr) for fr in frames):
                    per_fn[fn] += int(m.group(2))
    want = sum(s["weight_count"] for s in samples)
    assert total == want, f"folded total {total} != JSONL {want}"
    # One line per distinct stack: unknown frames are told apart by address.
    distinct = {tuple(f["name"].replace(";", ",") if f["name"] else
                      f"{f['module']}@{f['addr']}" if f["module"] else "[unknown]"
                      for f in s["stack"]) or ("none", s.get("stack_error"))
                for s in samples if s["weight_count"]}
    assert lines == len(distinct), f"{lines} lines for {len(distinct)} distinct stacks"
    for fn in DEMO_FNS:
        want_fn = sum(s["weight_count"] for s in samples if has_fn(s, fn))
        assert per_fn[fn] == want_fn, f"{fn}: folded {per_fn[fn]} != JSONL {want_fn}"
    return f"{lines} stacks, total {total}"


def png_pixels(path):
    """Decodes an 8-bit RGB/RGBA non-interlaced PNG (what chromium writes) to (w, h, rows)."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and not interlace, (depth, ctype, interlace)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    bpp = 4 if ctype == 6 else 3
    raw, stride, rows, prev = zlib.decompress(idat), w * bpp, [], bytearray(w * bpp)
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, rows


def chromium(url, *args):
    prof = tmpdir("d9chrome-")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           "--no-first-run", f"--user-data-dir={prof}", "--window-size=1400,900", *args, url]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
    assert p.returncode == 0, f"chromium exited {p.returncode}: {p.stderr[-1000:]}"
    return p.stdout


@test
def flamegraph_svg_well_formed():
    out, samples = profiled()
    path = os.path.join(out, "flamegraph.svg")
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.parse(path).getroot()
    titles = [t.text for t in root.iterfind(".//s:g[@class='f']/s:title", ns)]
    total = sum(s["weight_count"] for s in samples)
    assert titles[0].startswith(f"all ({total:,} resumes, 100.00%)"), titles[0]
    for fn in DEMO_FNS:
        if any(has_fn(s, fn) for s in samples):
            assert any(re.match(ASYNC_FN % fn + " ", t) for t in titles), f"no frame for {fn}"
    text = "".join(root.itertext())
    for label in ("async fn bodies", "Tokio runtime", "std / core / alloc", "Search"):
        assert label in text, f"legend/controls lack {label!r}"
    assert f"{total:,} estimated resumes from {len(samples):,} samples" in text
    return f"{len(titles)} frames"


@test
def flamegraph_renders_in_chromium():
    out, samples = profiled()
    path = os.path.join(out, "flamegraph.svg")
    shot = os.path.join(tmpdir("d9shot-"), "flamegraph.png")
    chromium("file://" + path, f"--screenshot={shot}")
    assert os.path.getsize(shot) > 10000, "tiny screenshot"
    shutil.copy(shot, SHOT_COPY)
    w, h, rows = png_pixels(shot)
    colours = {px for row in rows for px in row}
    # Frames in each palette band: async bodies red-orange, Tokio blue, std green.
    warm = sum(1 for row in rows for r, g, b in row if r > 200 and g < 170 and b < 120)
    blue = sum(1 for row in rows for r, g, b in row if b > 190 and r < 150 and g > 140)
    green = sum(1 for row in rows for r, g, b in row if g > 150 and r < 170 and b < 130)
    assert len(colours) > 200, f"only {len(colours)} colours: blank?"
    assert warm > 2000 and blue > 2000 and green > 2000, (warm, blue, green)
    # The script runs: a search from the URL highlights frames and reports the matched share,
    # which equals the JSONL share of samples with a matching frame.
    dom = chromium("file://" + path + "?s=cpu_kind_task", "--dump-dom")
    m = re.search(r"Matched: ([\d.]+)%", dom)
    assert m, "no Matched: line after search"
    # The flamegraph roots each stack at "task: FUTURE", so a sample without a stack matches
    # by its future.
    want = 100 * sum(s["weight_count"] for s in samples
                     if any("cpu_kind_task" in n for n in names(s) + [s["future"] or ""])) / sum(
        s["weight_count"] for s in samples)
    assert abs(float(m.group(1)) - want) < 0.1, f"matched {m.group(1)}% vs JSONL {want:.2f}%"
    shot2 = os.path.join(tmpdir("d9shot-"), "search.png")
    chromium("file://" + path + "?s=cpu_kind_task&z=Counted", f"--screenshot={shot2}")
    _, _, rows2 = png_pixels(shot2)
    magenta = sum(1 for row in rows2 for px in row if px == (224, 40, 224))
    assert magenta > 1000, f"search highlight not drawn ({magenta} px)"
    return (f"{w}x{h}, {len(colours)} colours, warm/blue/green px {warm}/{blue}/{green}; "
            f"matched {m.group(1)}% (JSONL {want:.2f}%); copy in {SHOT_COPY}")


@test
def killed_run_leaves_no_truncated_file():
    d = Demo(workers=2, mode="mix")
    out = tmpdir("d9out-kill-")
    log = os.path.join(tmpdir("d9log-"), "stderr")
    try:
        with open(log, "w") as err:
            p = subprocess.Popen([TOOL, "--pid", str(d.pid), "--duration", "60", "--output",
                                  out, "--format", FORMATS, *ALWAYS_ARMED], stdout=subprocess.DEVNULL,
                                 stderr=err)
        try:
            # Kill only once probes are attached and samples flow, i.e. mid-run.
            deadline = time.time() + 30
            while time.time() < deadline and p.poll() is None:
                with open(log) as f:
                    if "sampling pid" in f.read():
                        break
                time.sleep(0.1)
            else:
                raise AssertionError("dial9-bpf did not start sampling")
            time.sleep(2)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait(60)  # exit detaches the uprobes, which can take a while
    finally:
        d.stop()
    files = sorted(os.listdir(out))
    assert "samples.jsonl" in files, f"the tool never started writing: {files}"
    for name in ("profile.pb.gz", "stacks.folded", "flamegraph.svg"):
        assert name not in files, f"{name} present after SIGKILL: {files}"
        assert name + ".tmp" in files, f"{name}.tmp missing: {files}"
    return f"left {files}"


if __name__ == "__main__":
    raise SystemExit(run_all())
