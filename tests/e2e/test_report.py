#!/usr/bin/env python3
"""`dial9-bpf report DIR`: the summary of a real run, and one clear error for damaged input."""
import json
import os
import random
import re
import shutil
import tempfile

from harness import Demo, read_metadata, read_samples, read_stack_table, run_all, run_tool, test, tmpdir

DEMO_FNS = ("cpu_kind_task", "timer_kind_task", "channel_kind_producer",
            "channel_kind_consumer")

_cache = {}


def recorded():
    """One 5 s jsonl run of the mix demo, in the default stack_table layout: (output dir,
    samples as the inline layout's objects, metadata)."""
    if "run" not in _cache:
        d = Demo(workers=2, mode="mix")
        try:
            d.wait_seconds(2)
            out = tmpdir("d9report-")
            rc, _, err = run_tool("--pid", d.pid, "--format", "jsonl", "--duration", 5,
                                  "--output", out, "--quiet", timeout=65)
            assert rc == 0, f"dial9-bpf exited {rc}: {err[-1500:]}"
        finally:
            d.stop()
        _cache["run"] = (out, read_samples(out), read_metadata(out))
    return _cache["run"]


def inline_copy():
    """The same run converted to the inline layout (an old run's directory)."""
    if "inline" not in _cache:
        out, samples, meta = recorded()
        d = tmpdir("d9report-inline-")
        meta = dict(meta, samples=dict(meta["samples"], layout="inline"))
        with open(os.path.join(d, "metadata.json"), "w") as f:
            json.dump(meta, f)
        with open(os.path.join(d, "samples.jsonl"), "w") as f:
            f.writelines(json.dumps(s, separators=(",", ":")) + "\n" for s in samples)
        if os.path.exists(os.path.join(out, "long_polls.jsonl")):
            shutil.copy2(os.path.join(out, "long_polls.jsonl"), d)
        _cache["inline"] = d
    return _cache["inline"]


def report(path):
    return run_tool("report", path, timeout=60)


def demo_fn(names):
    """The innermost demo async fn among frame names (leaf first)."""
    for name in names:
        for fn in DEMO_FNS:
            if fn in name:
                return fn
    return None


@test
def report_of_a_real_run():
    out, samples, meta = recorded()
    rc, text, err = report(out)
    assert rc == 0, f"report exited {rc}: {err}"
    assert err == "", f"stderr not empty: {err}"
    assert f"pid {meta['target']['pid']} " in text, text[:500]
    assert f"{meta['sampler']['per_worker_hz']} samples/s per worker" in text
    named = [fn for fn in DEMO_FNS if fn in text]
    assert "cpu_kind_task" in text and len(named) >= 3, f"demo fns named: {named}\n{text}"
    assert "tokio::runtime" not in text, "runtime frames shown as the interesting ones"
    for w in meta["workers"]:
        row = re.compile(rf"^  {w['worker']}\s+{w['tid']}\s+\S+\s+{w['detection']}\s+\d+",
                         re.M)
        assert row.search(text), f"no row for worker {w['worker']}:\n{text}"
    assert f"{len(samples)} samples (" in text
    for name in meta["counters"]:
        assert name in text, f"counter {name} missing"
    capped = any(e["capped"] for w in meta["workers"] for e in w["epochs"])
    assert ("were capped" in text) == capped, "capped warning does not match the epochs"

    # The estimates add up: per demo fn, the report's rows sum to the samples' weight_count.
    rows = re.findall(r"^\s*\d+\s+[\d.]+%\s+(\d+)\s+(?:\d+|-)\s+[\d.]+\s+[\d.]+%\s+\d+\s+"
                      r"at \S+\n"
                      r"((?:        .*\n)+)", text, re.M)
    shown = re.search(r"shown: (\d+) of (\d+) stacks", text)
    assert rows and shown, text
    if shown.group(1) == shown.group(2):
        got, want = {}, {}
        for est, frames in rows:
            fn = demo_fn(frames.splitlines())
            got[fn] = got.get(fn, 0) + int(est)
        for s in samples:
            fn = demo_fn([f["name"] or "" for f in s["stack"]])
            want[fn] = want.get(fn, 0) + s["weight_count"]
        assert got == want, f"report {got} vs samples.jsonl {want}"
    return f"{len(samples)} samples, {len(meta['workers'])} workers, fns {named}"


def damaged(mutate, compact=False):
    """A copy of the real run's output (inline layout, or as written), changed by mutate(dir)."""
    out = recorded()[0] if compact else inline_copy()
    d = tmpdir("d9bad-")
    for name in ("metadata.json", "samples.jsonl", "stacks.jsonl"):
        if os.path.exists(os.path.join(out, name)):
            shutil.copy(os.path.join(out, name), d)
    mutate(d)
    return d


def edit_lines(name, fn):
    def mutate(d):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        lines = fn(lines)
        with open(path, "wb") as f:
            f.write(b"\n".join(lines))
    return mutate


def set_line(n, data):
    def fn(lines):
        lines[n - 1] = data
        return lines
    return fn


def sub_line(n, pattern, repl):
    def fn(lines):
        lines[n - 1] = re.sub(pattern, repl, lines[n - 1], count=1)
        return lines
    return fn


def sub_all(pattern, repl):
    def fn(lines):
        return [re.sub(pattern, repl, l, count=1) for l in lines]
    return fn


def replace_file(name, data):
    def mutate(d):
        path = os.path.join(d, name)
        os.unlink(path)
        if data is None:
            return
        if data == "dir":
            os.mkdir(path)
        elif data == "fifo":
            os.mkfifo(path)
        else:
            with open(path, "wb") as f:
                f.write(data)
    return mutate


def sub_file(name, pattern, repl):
    def mutate(d):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            data = f.read()
        new = re.sub(pattern, repl, data, count=1)
        assert new != data, f"{pattern} not in {name}"
        with open(path, "wb") as f:
            f.write(new)
    return mutate


def cut_file(name, keep):
    def mutate(d):
        path = os.path.join(d, name)
        with open(path, "rb") as f:
            data = f.read()
        with open(path, "wb") as f:
            f.write(data[:keep(len(data))])
    return mutate


GARBAGE = bytes(random.Random(9).getrandbits(8) for _ in range(20000))
HOSTILE = [
    # (case, mutation, file named in the error, text that must be in the line)
    ("no samples.jsonl", replace_file("samples.jsonl", None), "samples.jsonl", "--format"),
    ("no metadata.json", replace_file("metadata.json", None), "metadata.json", "finished"),
    ("samples.jsonl is a directory", replace_file("samples.jsonl", "dir"), "samples.jsonl",
     "directory"),
    ("metadata.json is a directory", replace_file("metadata.json", "dir"), "metadata.json",
     "directory"),
    ("samples.jsonl is a fifo", replace_file("samples.jsonl", "fifo"), "samples.jsonl",
     "regular file"),
    ("empty metadata.json", replace_file("metadata.json", b""), "metadata.json", "empty"),
    ("empty samples.jsonl", replace_file("samples.jsonl", b""), "samples.jsonl",
     "no samples"),
    ("invalid JSON line", edit_lines("samples.jsonl", set_line(3, b"{not json}")),
     "samples.jsonl", "line 3: invalid JSON"),
    ("line cut in the middle", edit_lines("samples.jsonl", lambda l: set_line(2, l[1][:300])(l)),
     "samples.jsonl", "line 2:"),
    ("worker is a string", edit_lines("samples.jsonl", sub_line(4, rb'"worker":-?\d+',
                                                               b'"worker":"x"')),
     "samples.jsonl", 'line 4: "worker" is a string'),
    ("probability 1e300", edit_lines("samples.jsonl", sub_line(
        5, rb'"inclusion_probability":[^,]+', b'"inclusion_probability":1e300')),
     "samples.jsonl", "line 5: \"inclusion_probability\""),
    ("weight beyond 64 bits", edit_lines("samples.jsonl", sub_line(
        1, rb'"weight_count":\d+', b'"weight_count":99999999999999999999999')),
     "samples.jsonl", "line 1: \"weight_count\""),
    ("fractional weight", edit_lines("samples.jsonl", sub_line(
        2, rb'"weight_idle_ns":\d+', b'"weight_idle_ns":1e30')),
     "samples.jsonl", "line 2: \"weight_idle_ns\""),
    ("stack of numbers", edit_lines("samples.jsonl", sub_line(
        6, rb'"stack":\[.*\]', b'"stack":[1,2,3]')),
     "samples.jsonl", 'line 6: "stack[0]"'),
    ("NUL byte", edit_lines("samples.jsonl", sub_line(2, rb'"capped"', b'"cap\x00ped"')),
     "samples.jsonl", "line 2: binary data"),
    ("2 MiB line", edit_lines("samples.jsonl", lambda l: l[:3] + [b'{"a":"' + b"x" * (2 << 20)
                                                                 + b'"}'] + l[3:]),
     "samples.jsonl", "line 4: longer than 1 MiB"),
    ("binary samples.jsonl", replace_file("samples.jsonl", GARBAGE), "samples.jsonl", "line 1"),
    ("binary metadata.json", replace_file("metadata.json", GARBAGE), "metadata.json", "line 1"),
    ("metadata.json is an array", replace_file("metadata.json", b"[1, 2]\n"), "metadata.json",
     "expected an object"),
    ("metadata.json cut short", cut_file("metadata.json", lambda n: n // 2), "metadata.json",
     "ends early"),
    ("workers is an object", sub_file("metadata.json", rb'"workers": \[', b'"workers": 1, "w": ['),
     "metadata.json", '"workers" is an integer, expected an array'),
    ("per_worker_hz is 0", sub_file("metadata.json", rb'"per_worker_hz": \d+',
                                    b'"per_worker_hz": 0'),
     "metadata.json", '"sampler.per_worker_hz" is 0'),
    ("selected above eligible", sub_file("metadata.json", rb'"selected": \d+',
                                         b'"selected": 999999999999'),
     "metadata.json", ".selected\" is 999999999999"),
]


# The same for the stack_table layout's own ways of being damaged.
HOSTILE_COMPACT = [
    ("no stacks.jsonl", replace_file("stacks.jsonl", None), "stacks.jsonl", "directory whole"),
    ("stacks.jsonl is a fifo", replace_file("stacks.jsonl", "fifo"), "stacks.jsonl",
     "regular file"),
    ("stack id not in the table", edit_lines("samples.jsonl", sub_line(3, rb",\d+\]$",
                                                                      b",999999]")),
     "samples.jsonl", 'line 3: "stack_id" 999999 is not in stacks.jsonl'),
    ("stack id a string", edit_lines("samples.jsonl", sub_line(3, rb",\d+\]$", b',"x"]')),
     "samples.jsonl", 'line 3: "stack_id" is a string'),
    ("row too short", edit_lines("samples.jsonl", set_line(2, b"[1,2]")), "samples.jsonl",
     "line 2: the row has 2 values"),
    ("row cut in the middle", edit_lines("samples.jsonl", lambda l: set_line(2, l[1][:50])(l)),
     "samples.jsonl", "line 2:"),
    ("header not columns", edit_lines("stacks.jsonl", set_line(1, b'{"columns":5}')),
     "stacks.jsonl", 'line 1: "columns" is an integer'),
    ("record with another id", edit_lines("stacks.jsonl", sub_all(rb'^\{"id":0,', b'{"id":7,')),
     "samples.jsonl", '"id" is 7, expected 0'),
    ("frame id not in the table", edit_lines("stacks.jsonl", sub_all(rb'"frames":\[\d+',
                                                                      b'"frames":[999999')),
     "samples.jsonl", '"frames[0]" is not a frame id'),
    ("neither stack nor frame", edit_lines("stacks.jsonl", set_line(2, b'{"x":1}')),
     "stacks.jsonl", "line 2: neither a stack nor a frame record"),
    ("binary stacks.jsonl", replace_file("stacks.jsonl", GARBAGE), "stacks.jsonl", "line 1"),
]


@test
def hostile_inputs_fail_cleanly():
    done = []
    cases = [c + (False,) for c in HOSTILE] + [c + (True,) for c in HOSTILE_COMPACT]
    for case, mutate, fname, needle, compact in cases:
        d = damaged(mutate, compact)
        try:
            rc, text, err = report(d)
            lines = [x for x in err.splitlines() if x.strip()]
            assert rc != 0, f"{case}: exit 0"
            assert len(lines) == 1, f"{case}: expected one stderr line, got {lines[:5]}"
            line = lines[0]
            assert line.startswith("dial9-bpf: "), f"{case}: {line}"
            assert os.path.join(d, fname) in line, f"{case}: {fname} not named: {line}"
            assert needle in line, f"{case}: '{needle}' not in: {line}"
            assert text == "", f"{case}: a report was printed"
            done.append(case)
        finally:
            shutil.rmtree(d)
    return f"{len(done)} cases"


@test
def bad_directory():
    out, _, _ = recorded()
    missing = os.path.join(tempfile.gettempdir(), "d9-no-such-dir-%d" % os.getpid())
    for path, needle in ((missing, "No such file"),
                         (os.path.join(out, "metadata.json"), "not a directory")):
        rc, text, err = report(path)
        lines = err.splitlines()
        assert rc != 0 and len(lines) == 1 and path in lines[0] and needle in lines[0], \
            (rc, lines)
        assert text == ""
    rc, _, err = run_tool("report")
    assert rc != 0 and len(err.splitlines()) == 1, (rc, err)


@test
def truncated_last_line_is_a_warning():
    """A run killed mid-write leaves a cut last line: reported, skipped, not fatal."""
    _, samples, _ = recorded()
    # Less than a row of the stack_table layout (~190 B) is cut from it.
    for compact, cut in ((False, 200), (True, 100)):
        d = damaged(cut_file("samples.jsonl", lambda n: n - cut), compact)
        try:
            rc, text, err = report(d)
            lines = err.splitlines()
            assert rc == 0, f"exit {rc}: {err}"
            assert len(lines) == 1 and "warning" in lines[0] and \
                f"line {len(samples)}:" in lines[0], lines
            assert f"{len(samples) - 1} samples (" in text
            assert f"line {len(samples)} was cut short" in text
            assert re.search(rf"samples.jsonl has {len(samples) - 1} samples but metadata.json "
                             rf"says {len(samples)}", text)
        finally:
            shutil.rmtree(d)
    return lines[0]


@test
def compact_layout_matches_inline():
    """The stack_table layout: small rows, every stack id in the table in first-seen order,
    and the report the same as on the inline layout of the same run."""
    out, samples, meta = recorded()
    assert meta["samples"]["layout"] == "stack_table", meta["samples"]
    with open(os.path.join(out, "samples.jsonl")) as f:
        rows = [json.loads(l) for l in f]
    header, records = read_stack_table(out)
    sid = header["columns"].index("stack_id")
    assert sorted(records) == list(range(len(records))), sorted(records)[:20]
    first_seen = list(dict.fromkeys(r[sid] for r in rows))
    assert first_seen == list(range(len(records))), f"ids not in first-seen order: {first_seen}"
    size = os.path.getsize(os.path.join(out, "samples.jsonl"))
    table = os.path.getsize(os.path.join(out, "stacks.jsonl"))
    per = size / len(rows)
    assert per <= 300, f"{per:.0f} bytes per sample"
    rc1, compact, err1 = report(out)
    rc2, inline, err2 = report(inline_copy())
    assert rc1 == 0 and rc2 == 0 and err1 == "" and err2 == "", (rc1, err1, rc2, err2)
    drop_dir = lambda t: t.split("\n", 1)[1]
    assert drop_dir(compact) == drop_dir(inline), "reports differ"
    return (f"{len(rows)} samples: {per:.0f} B each, stacks.jsonl {table} B for "
            f"{len(records)} stacks ({(size + table) / len(rows):.0f} B a sample with it)")


if __name__ == "__main__":
    try:
        rc = run_all()
    finally:
        if "run" in _cache:
            shutil.rmtree(_cache["run"][0], ignore_errors=True)
        if "inline" in _cache:
            shutil.rmtree(_cache["inline"], ignore_errors=True)
    raise SystemExit(rc)
