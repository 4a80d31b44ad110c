#!/bin/sh
# run.sh BIN [SECONDS] — the bounded soak (tests/soak/soak.py): BIN on a
# loopback port with the default model, a steady mix of valid and invalid
# requests for SECONDS (60..600, default 180), RSS and fds sampled every
# second. Pass criteria are in soak.py's header. Writes $SOAK_OUT (default
# build/soak): soak.csv, server.log, summary.txt and soak_rss.png, or the PNG
# named by $SOAK_PNG. Debian's python3 on purpose, as in tests/e2e/run.sh.
set -eu
if [ $# -lt 1 ]; then
    echo "usage: $0 BIN [SECONDS]" >&2
    exit 2
fi
BIN=$(realpath "$1")
SECONDS_=${2:-180}
HERE=$(dirname "$(realpath "$0")")
ROOT=$(dirname "$(dirname "$HERE")")
OUT=${SOAK_OUT:-$ROOT/build/soak}
PNG=${SOAK_PNG:-$OUT/soak_rss.png}
PY=/usr/bin/python3
if ! "$PY" -c 'import requests' 2>/dev/null; then
    echo "soak: $PY lacks requests; run scripts/install-deps.sh" >&2
    exit 2
fi
mkdir -p "$OUT"
# The driver stops the server itself; the outer bound only guards a hang.
exec timeout -k 10 $((SECONDS_ + 180)) "$PY" "$HERE/soak.py" --bin "$BIN" --seconds "$SECONDS_" \
    --out "$OUT" --png "$PNG"
