#!/usr/bin/env python3
"""Quick A/B of dial9-bpf variants on one demo: `tools/bench-ab.py [--mode hot|mix] CONFIG...`

Each CONFIG (NAME[:ENV=V,...[:EXTRA ARGS]]) is a dial9-bpf run at its defaults plus EXTRA ARGS,
with ENV set (TOOLBIN=PATH runs another binary, e.g. a build of the previous commit; PERF=dwarf
or PERF=fp runs `perf record --call-graph dwarf` or `-g` at -F PERFHZ, default 99). ONE demo
runs throughout, and the configurations are interleaved with unprofiled segments (rotated each
round), as tools/bench-overhead.py does (its Demo and segment_figures are reused): each
profiled segment is compared with the unprofiled ones just before and after it. Printed per
segment: throughput loss over the whole run ("loss") and over the seconds the tool sampled
("loss-while-sampling"), target CPU per poll, the tool's own estimate of its cost, armed
fraction, samples; then the means per configuration and the baselines' noise. Root.

    tools/bench-ab.py --mode mix --seg 10 --rounds 4 new old:TOOLBIN=/tmp/dial9-bpf.old
"""
import importlib.util
import os
import sys
import json
import time
import subprocess

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
spec = importlib.util.spec_from_file_location("bo", os.path.join(ROOT, "tools", "bench-overhead.py"))
bo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bo)
bo.NICE = -10
import argparse
ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--seg", type=int, default=15)
ap.add_argument("--rounds", type=int, default=3)
ap.add_argument("--mode", default="hot")
ap.add_argument("--workers", type=int, default=2,
                help="the demo's workers (1 keeps a CPU free for the tool: steadier figures)")
ap.add_argument("--tool", default=os.path.join(ROOT, "build", "dial9-bpf"))
ap.add_argument("configs", nargs="+",
                help="NAME[:ENV=V,...[:EXTRA ARGS]]; TOOLBIN=PATH in the env part picks a binary")
a = ap.parse_args()
import shutil, tempfile
wd = tempfile.mkdtemp(prefix="ab-")
tool = os.path.join(wd, "dial9-bpf"); shutil.copy2(a.tool, tool)
demo_bin = os.path.join(wd, "demo"); shutil.copy2(os.path.join(ROOT, "build", "demo-fp"), demo_bin); bo.DEMO = demo_bin
cfgs = []
for c in a.configs:
    parts = c.split(":")
    env = dict(kv.split("=",1) for kv in parts[1].split(",") if kv) if len(parts) > 1 else {}
    extra = parts[2].split() if len(parts) > 2 else []
    cfgs.append((parts[0], env, extra))
demo = bo.Demo(wd, a.mode, a.workers)
time.sleep(3)
segs = []
def base(i):
    t0 = bo.mono_ns(); time.sleep(a.seg); return {"kind":"base","t0":t0,"t1":bo.mono_ns(),"key":"base"}
try:
    segs.append(base(0))
    for r in range(a.rounds):
        for k in range(len(cfgs)):
            name, env, extra = cfgs[(k + r) % len(cfgs)]
            out = os.path.join(wd, f"s{len(segs)}")
            os.makedirs(out)
            e = dict(os.environ); e.update(env)
            if "PERF" in env:
                # perf record as tools/bench-overhead.py runs it: its figures cover `sleep`.
                cmd = ["perf", "record", "-F", env.get("PERFHZ", "99"), "-p", str(demo.pid),
                       "-o", out + "/perf.data"]
                cmd += ["-g"] if env["PERF"] == "fp" else ["--call-graph", "dwarf"]
                cmd += extra + ["--", "sleep", str(a.seg)]
            else:
                cmd = [env.get("TOOLBIN", tool), "--pid", str(demo.pid), "-d", str(a.seg), "-o", out, "--quiet"] + extra
            t0 = bo.mono_ns()
            p = subprocess.run(["nice","-n","-10"]+cmd, env=e, stdout=subprocess.DEVNULL, stderr=open(out+".err","w"))
            t1 = bo.mono_ns()
            rec = {"kind":"d9","key":name,"t0":t0,"t1":t1,"rc":p.returncode,"out":out}
            if "PERF" in env:
                rec["s0"], rec["s1"] = t0, min(t1, t0 + int((a.seg + 0.5) * 1e9))
            try:
                m = json.load(open(out+"/metadata.json"))
                rec["s0"], rec["s1"] = m["sampling_started_at_ns"], m["sampling_stopped_at_ns"]
                rec["est"] = m["overhead"].get("est_overhead_pct")
                rec["armed"] = m["overhead"].get("armed_fraction")
                rec["samples"] = m["samples"]["written"]
                rec["hit"] = m["overhead"]["probe_hit_cost_ns"]
            except Exception as ex:
                rec["err"] = repr(ex)
            segs.append(rec)
            segs.append(base(0))
            print(name, "rc", p.returncode, file=sys.stderr, flush=True)
    time.sleep(1.2)
    for r in segs:
        bo.segment_figures(demo, r)
        if "s0" in r:
            r2 = dict(r); r2["t0"], r2["t1"] = r["s0"], r["s1"]
            bo.segment_figures(demo, r2)
            r["work_samp"] = r2.get("work_s"); r["cpp_samp"] = r2.get("cpu_ns_poll")
finally:
    demo.stop()
for r in segs:
    # perf's samples, counted after the run so that no segment pays for it.
    if r["kind"] != "base" and r.get("samples") is None and os.path.exists(r["out"] + "/perf.data"):
        st = subprocess.run(["perf", "report", "-i", r["out"] + "/perf.data", "--stats"],
                            capture_output=True, text=True).stdout
        n = [int(l.split()[2]) for l in st.splitlines() if l.strip().startswith("SAMPLE events:")]
        r["samples"] = n[0] if n else None
res = {}
for i, r in enumerate(segs):
    if r["kind"] == "base": continue
    nb = [segs[j] for j in (i-1, i+1)]
    bw = sum(x["work_s"] for x in nb)/2; bc = sum(x["cpu_ns_poll"] for x in nb)/2
    loss = 100*(1-r["work_s"]/bw); ls = 100*(1-r["work_samp"]/bw) if r.get("work_samp") else None
    res.setdefault(r["key"], []).append((loss, ls, r["cpu_ns_poll"]/bc, r.get("est"), r.get("armed"), r.get("samples")))
    print(f'{r["key"]:12s} loss {loss:5.2f}%  loss-while-sampling {ls if ls is None else round(ls,2)}%  cpu/poll x{r["cpu_ns_poll"]/bc:.3f}  est {r.get("est")}% armed {r.get("armed")} samples {r.get("samples")}')
bases = [r["work_s"] for r in segs if r["kind"]=="base"]
import statistics
noise = [bases[i]/((bases[i-1]+bases[i+1])/2)-1 for i in range(1,len(bases)-1)]
print("baseline work/s", round(statistics.mean(bases)), "noise sd %.2f%%" % (100*statistics.pstdev(noise) if noise else 0))
def mse(xs):
    """mean +- standard error"""
    xs = [x for x in xs if x is not None]
    if not xs:
        return "n/a"
    se = statistics.stdev(xs) / len(xs) ** 0.5 if len(xs) > 1 else 0
    return f"{statistics.mean(xs):.2f} +- {se:.2f}"
for k, v in res.items():
    smp = [x[5] for x in v if x[5] is not None]
    print(f"{k:12s} mean loss {mse(x[0] for x in v)}%  while sampling {mse(x[1] for x in v)}%  "
          f"cpu/poll x{statistics.mean(x[2] for x in v):.3f}  samples {statistics.mean(smp) if smp else 'n/a'}")
# Round by round against the first configuration: the demo's slow drift cancels out.
keys = list(res)
for k in keys[1:]:
    n = min(len(res[keys[0]]), len(res[k]))
    d = [res[keys[0]][i][0] - res[k][i][0] for i in range(n)]
    dw = [res[keys[0]][i][1] - res[k][i][1] for i in range(n)
          if res[keys[0]][i][1] is not None and res[k][i][1] is not None]
    print(f"{keys[0]} - {k}, paired by round: loss {mse(d)}%  while sampling {mse(dw)}%")
