#!/bin/bash
# Cost of an on-CPU sample, end to end (bench/RESULTS.md, "On-CPU samples"): the demo's two
# CPU-bound kinds on 2 workers, the tool at --cpu-hz 0 and then at a high rate on the same demo.
# Loader: its CPU (utime + stime) between 3 and 11 s into the run, over the cpu samples written
# in that span, less the same at --cpu-hz 0. BPF: cpu_tick's run time from the kernel's BPF
# statistics (which the tool turns on) over its runs and over the samples.
# Usage: tools/bench-cpu-sample.sh [HZ]   (from the tree's root, as root; default HZ 9999)
HZ=${1:-9999}
B=build
tk=$(getconf CLK_TCK)
cpu() { awk -v tk="$tk" '{print ($14 + $15) / tk}' "/proc/$1/stat"; }
stats() { bpftool prog show name cpu_tick 2>/dev/null | grep -o "run_time_ns [0-9]* run_cnt [0-9]*"; }
for bin in demo-fp demo-nofp; do
	$B/$bin --workers 2 --mode mix --duration 0 --cpu-tasks 0 --timer-tasks 2 \
		--channel-tasks 0 --blocking-tasks 0 --oncpu-tasks 2 >/dev/null 2>&1 &
	D=$!
	sleep 1
	for hz in 0 "$HZ"; do
		out=$(mktemp -d /tmp/d9-cpu-sample-XXXXXX)
		$B/dial9-bpf -p $D -d 12 -q --cpu-hz "$hz" -o "$out" &
		T=$!
		sleep 3
		c0=$(cpu $T) s0=$(stats) t0=$(awk '{print $1 * 1e9}' /proc/uptime)
		sleep 8
		c1=$(cpu $T) s1=$(stats) t1=$(awk '{print $1 * 1e9}' /proc/uptime)
		wait $T
		python3 - "$out" "$bin" "$hz" "$c0" "$c1" "$t0" "$t1" "$s0" "$s1" <<'PY'
import json, sys
out, binary, hz, c0, c1, t0, t1 = sys.argv[1:8]
s0, s1 = sys.argv[8].split(), sys.argv[9].split()
# Samples in the CPU-time span: CLOCK_MONOTONIC and /proc/uptime share a base on Linux.
n = sum(1 for l in open(out + "/samples.jsonl") if '"kind":"cpu"' in l and
        float(t0) <= json.loads(l)["timestamp_ns"] <= float(t1))
line = f"{binary} --cpu-hz {hz}: loader {float(c1) - float(c0):.2f} s CPU, {n} cpu samples"
if s0 and s1 and n:
    run, cnt = int(s1[1]) - int(s0[1]), int(s1[3]) - int(s0[3])
    line += f"; cpu_tick {run / cnt / 1e3:.2f} us a run, {run / n / 1e3:.1f} us a sample"
print(line)
PY
		rm -rf "$out"
	done
	kill $D
	wait $D 2>/dev/null
done
