#!/usr/bin/env bash
# Profile the Tokio demo for 10 s and summarise. Builds nothing: run `make demo` (or
# `make all demo-bin`) first. Run from the repository root.
#   out/demo/demo.jsonl   ground truth from the demo (start / per-second / end lines)
#   out/demo/             profiler output (samples.jsonl, ...)
set -euo pipefail

PROFILER=${DIAL9_BPF:-build/dial9-bpf}
DEMO=${DIAL9_DEMO:-build/demo-fp}
OUT=out/demo

for f in "$PROFILER" "$DEMO"; do
	if [ ! -x "$f" ]; then
		echo "run-demo: $f missing; run 'make all demo-bin' first" >&2
		exit 1
	fi
done

mkdir -p "$OUT"
DEMO_PID=""
cleanup() {
	if [ -n "$DEMO_PID" ] && kill -0 "$DEMO_PID" 2>/dev/null; then
		kill "$DEMO_PID" 2>/dev/null || true
		wait "$DEMO_PID" 2>/dev/null || true
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$DEMO" --duration 0 >"$OUT/demo.jsonl" 2>"$OUT/demo.stderr" &
DEMO_PID=$!
echo "run-demo: demo pid $DEMO_PID, warming up 2 s" >&2
sleep 2
if ! kill -0 "$DEMO_PID" 2>/dev/null; then
	echo "run-demo: demo exited early; see $OUT/demo.stderr" >&2
	exit 1
fi

"$PROFILER" --pid "$DEMO_PID" --duration 10 --output "$OUT"

cleanup
DEMO_PID=""

SAMPLES="$OUT/samples.jsonl"
echo "results in $OUT/ (profiler output; demo ground truth in $OUT/demo.jsonl)"
if [ -f "$SAMPLES" ]; then
	echo "samples: $(wc -l <"$SAMPLES") lines in $SAMPLES"
	echo "top 5 leaf-most demo frames (first frame containing 'kind_', stacks are leaf first):"
	# samples.jsonl's rows end in a stack id; stacks.jsonl's stack records list frame ids.
	jq -n -r --slurpfile t "$OUT/stacks.jsonl" '
		($t[1:] | map(select(has("frame")) | {(.frame | tostring): .name}) | add) as $f
		| ($t[1:] | map(select(has("id")) | {(.id | tostring): ([.frames[] | $f[tostring] // empty
			| select(contains("kind_"))] | .[0])}) | add) as $k
		| inputs | $k[.[-1] | tostring] // empty' \
		"$SAMPLES" | sort | uniq -c | sort -rn | awk 'NR <= 5'
else
	echo "no $SAMPLES written" >&2
	exit 1
fi

echo
echo "files: $(cd "$OUT" && ls | tr '\n' ' ')"
echo "  perf report -i $OUT/perf.data    go tool pprof -top $OUT/profile.pb.gz"
echo "  open $OUT/flamegraph.svg in a browser"
echo
"$PROFILER" report "$OUT" | head -40
