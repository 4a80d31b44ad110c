#!/bin/sh
# run.sh BIN — attnserve under valgrind memcheck (tests/valgrind/memcheck.py):
# a short serving run with a request of every kind, then every start-up
# failure path; no memory error and no definite or indirect leak anywhere.
# Logs go to $VALGRIND_OUT (default build/valgrind). Debian's python3 on
# purpose, as in tests/e2e/run.sh.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 BIN [memcheck.py args]" >&2
    exit 2
fi
BIN=$(realpath "$1")
shift
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$(dirname "$HERE")")
OUT=${VALGRIND_OUT:-$ROOT/build/valgrind}
PY=/usr/bin/python3
if ! "$PY" -c 'import requests' 2>/dev/null; then
    echo "valgrind: $PY lacks requests; run scripts/install-deps.sh" >&2
    exit 2
fi
mkdir -p "$OUT"
exec timeout -k 10 1800 "$PY" "$HERE/memcheck.py" --bin "$BIN" --out "$OUT" "$@"
