#!/bin/sh
# run.sh BIN [criterion args] — the C unit tests, with every failure repeated
# at the end. Criterion reports a failed assertion when its test ends, among
# hundreds of lines of other tests' output (--jobs interleaves them), so a
# log that keeps only its tail (CI's) would name no failing test; the
# summary after Criterion's own lists each [FAIL] line and the assertion
# lines ([----]) that explain it. The exit status is Criterion's.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 BIN [criterion args]" >&2
    exit 2
fi
BIN=$1
shift
LOG=$(mktemp -t attn-unit-XXXXXX)
trap 'rm -f "$LOG" "$LOG.rc"' EXIT
# tee shows the output as it comes; the status goes through a file because
# a POSIX pipeline's status is tee's.
{
    rc=0
    "$BIN" "$@" 2>&1 || rc=$?
    echo "$rc" >"$LOG.rc"
} | tee "$LOG"
rc=$(cat "$LOG.rc")
if [ "$rc" != 0 ]; then
    echo
    echo "unit tests failed (exit $rc); the failures, repeated from above:"
    grep -E '^\[(FAIL|----)\]' "$LOG" || echo "  (no [FAIL] line: Criterion itself stopped; see above)"
fi
exit "$rc"
