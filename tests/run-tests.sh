#!/usr/bin/env bash
# Runs every test: the cmocka unit tests (TAP output) and the end-to-end tests that attach to
# real processes. Ends with one line "N passed, N failed".
set -u
cd "$(dirname "$0")/.."
passed=0
failed=0
known=0

for t in build/tests/test_*; do
	[ -x "$t" ] || continue
	out=$(CMOCKA_MESSAGE_OUTPUT=TAP "$t" 2>&1)
	rc=$?
	p=$(grep -c '^ok ' <<<"$out")
	# A skipped case (cmocka: "not ok N # SKIP") is neither passed nor failed.
	f=$(grep '^not ok ' <<<"$out" | grep -vc '# SKIP')
	if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
	echo "unit $(basename "$t"): $p passed, $f failed"
	[ "$f" -gt 0 ] && grep -E '^not ok|^#' <<<"$out" | sed 's/^/    /'
	passed=$((passed + p))
	failed=$((failed + f))
done

for t in tests/e2e/test_*.py; do
	out=$(mktemp)
	t0=$SECONDS
	python3 "$t" --summary-file "$out"
	rc=$?
	k=
	read -r p f k <"$out" 2>/dev/null || { p=0; f=1; }
	if [ "$rc" -ne 0 ] && [ "${f:-0}" -eq 0 ]; then f=1; fi
	rm -f "$out"
	echo "e2e $(basename "$t"): ${p:-0} passed, ${f:-1} failed${k:+, $k known gaps} in $((SECONDS - t0)) s"
	passed=$((passed + ${p:-0}))
	known=$((known + ${k:-0}))
	failed=$((failed + ${f:-1}))
done

# A known gap (tests/e2e/harness.py, KnownGap) is an open issue's target the tool says it
# does not meet on this machine: listed above as KNOWN with its figures, neither passed nor
# failed.
[ "$known" -gt 0 ] && echo "$known known gaps (KNOWN lines above), neither passed nor failed"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
