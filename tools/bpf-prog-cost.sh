#!/bin/bash
# What each of dial9-bpf's BPF programs costs, from the kernel's BPF statistics:
#   tools/bpf-prog-cost.sh [MODE [WORKERS]] [-- DIAL9-BPF ARGS]
# Starts build/demo-fp (--mode MODE, default mix, WORKERS default 2; D9_DEMO=PATH runs another
# build of the demo), profiles it for 12 s with build/dial9-bpf and the given arguments, and
# prints each program's runs, mean run time and total after 10 s, then the tool's own estimate
# of its cost. Root.
set -eu
cd "$(dirname "$0")/.."
mode=${1:-mix}
workers=${2:-2}
[ $# -ge 1 ] && shift
[ $# -ge 1 ] && [ "$1" != -- ] && shift
[ $# -ge 1 ] && [ "$1" = -- ] && shift
out=$(mktemp -d /tmp/d9-progcost-XXXXXX)
was=$(sysctl -n kernel.bpf_stats_enabled)
sysctl -q kernel.bpf_stats_enabled=1
"${D9_DEMO:-build/demo-fp}" --workers "$workers" --mode "$mode" --duration 30 >/dev/null 2>&1 &
demo=$!
trap 'kill $demo 2>/dev/null; sysctl -q kernel.bpf_stats_enabled=$was' EXIT
sleep 2
build/dial9-bpf --pid "$demo" -d 12 -o "$out/run" --quiet "$@" &
tool=$!
sleep 10
bpftool prog show -j | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("run_cnt"):
        print("%-16s runs %8d  mean %6.0f ns  total %7.1f ms" % (p.get("name"), p["run_cnt"],
              p["run_time_ns"] / p["run_cnt"], p["run_time_ns"] / 1e6))'
wait $tool
python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))["overhead"]
print("est_overhead_pct", o["est_overhead_pct"], "probe_cpu_s_est", o["probe_cpu_s_est"],
      "target_cpu_s", o["target_cpu_s"])' "$out/run/metadata.json"
rm -rf "$out"
