#!/bin/bash
# Target safety soak: `tools/soak.sh [SECONDS]` (default 1200; root). Both demo workloads run
# throughout while dial9-bpf attaches to them and detaches over and over, in every mode: always
# armed, default windows, 1000 Hz, and always armed stopped by SIGINT after 3-9 s. Fails (exit 1)
# if a demo dies, a demo skips a second of its report, or the kernel logs a new segfault.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TOOL=$ROOT/build/dial9-bpf
DEMO=$ROOT/build/demo-fp
[ -x "$TOOL" ] && [ -x "$DEMO" ] || { echo "soak: run make && make demo-bin first" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "soak: run as root (dial9-bpf attaches uprobes)" >&2; exit 2; }
dir=$(mktemp -d /tmp/d9-soak-XXXXXX)
end=$(($(date +%s) + ${1:-1200}))
segv0=$(dmesg | grep -c segfault)
"$DEMO" --workers 2 --mode mix --duration 0 >"$dir/mix.jsonl" 2>/dev/null &
mix=$!
"$DEMO" --workers 2 --mode hot --duration 0 >"$dir/hot.jsonl" 2>/dev/null &
hot=$!
trap 'kill $mix $hot 2>/dev/null' EXIT
sleep 2
i=0
fail=0
while [ "$(date +%s)" -lt "$end" ] && [ $fail = 0 ]; do
	for pid in $mix $hot; do
		case $((i % 4)) in
		0) args="--overhead-budget 100 -d 20" ;;
		1) args="-d 20" ;;
		2) args="--per-worker-hz 1000 -d 20" ;;
		3) args="--overhead-budget 100 -d 60" ;;
		esac
		rm -rf "$dir/out"
		if [ $((i % 4)) = 3 ]; then
			"$TOOL" --pid $pid $args -o "$dir/out" --quiet &
			t=$!
			sleep $((3 + i % 7))
			kill -INT $t
			wait $t
		else
			"$TOOL" --pid $pid $args -o "$dir/out" --quiet
		fi
		rc=$?
		echo "run $i pid $pid ($args): rc $rc"
		if ! kill -0 $mix 2>/dev/null || ! kill -0 $hot 2>/dev/null; then
			echo "soak: a demo died during run $i"
			fail=1
			break
		fi
		i=$((i + 1))
	done
done
segv=$(($(dmesg | grep -c segfault) - segv0))
for m in mix hot; do
	# one report line per CLOCK_MONOTONIC second: a gap means the demo stalled or restarted
	python3 - "$dir/$m.jsonl" "$m" <<'PY' || fail=1
import json, sys
secs = [json.loads(l)["sec"] for l in open(sys.argv[1]) if '"second"' in l]
gaps = sum(1 for a, b in zip(secs, secs[1:]) if b != a + 1)
print(f"{sys.argv[2]} demo: {len(secs)} seconds reported, {gaps} gaps")
sys.exit(1 if gaps or not secs else 0)
PY
done
[ $segv = 0 ] || { echo "soak: $segv new segfault(s) in the kernel log"; fail=1; }
echo "soak: $i runs, $([ $fail = 0 ] && echo passed || echo FAILED)"
exit $fail
