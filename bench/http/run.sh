#!/bin/sh
# run.sh BIN — HTTP benchmark (make bench-http): wrk against /health and small
# /v1/attention requests at several concurrencies; prints one Markdown table
# row per run (requests/s, p50, p99). Loopback only; each run lasts
# DURATION (default 5s). The server gets THREADS compute threads (default:
# every core) and logs at warn, so per-request log lines are not measured.
#
#   bench/http/run.sh build/attnserve
#   CONNS="1 16 64 256" DURATION=10s BACKEND=fused bench/http/run.sh build/attnserve
set -eu
BIN=$(realpath "${1:?usage: $0 BIN}")
HERE=$(dirname "$(realpath "$0")")
CONNS=${CONNS:-"1 16 64 256"}
DURATION=${DURATION:-5s}
BACKEND=${BACKEND:-auto}
THREADS=${THREADS:-0}
WRK_THREADS=${WRK_THREADS:-2}

if ! command -v wrk >/dev/null; then
    echo "bench-http: installing wrk (Debian package)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q --no-install-recommends wrk >&2
fi

TMP=$(mktemp -d)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '{}' >"$TMP/config.json"
"$BIN" --config "$TMP/config.json" --host=127.0.0.1 --port="$PORT" --backend="$BACKEND" \
    --threads="$THREADS" --log_level=warn --max_connections=1024 >"$TMP/server.log" 2>&1 &
SERVER=$!
cleanup() {
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

URL="http://127.0.0.1:$PORT"
for _ in $(seq 100); do
    curl -sf "$URL/ready" >/dev/null 2>&1 && break
    sleep 0.05
done
curl -sf "$URL/ready" >/dev/null || { cat "$TMP/server.log" >&2; exit 1; }
INFO=$(curl -sf "$URL/info")
echo "server: $(echo "$INFO" | /usr/bin/python3 -c 'import json,sys; i=json.load(sys.stdin); print("backend", i["backend"], "simd", i["simd"], "threads", i["threads"])'), cores $(nproc), wrk threads $WRK_THREADS, $DURATION per run"

# 16 tokens x 4 heads x 32 dims: a small request whose cost is mostly HTTP,
# JSON and batching rather than the kernel.
/usr/bin/python3 "$HERE/make_body.py" 16 4 32 nested >"$TMP/nested.json"
/usr/bin/python3 "$HERE/make_body.py" 16 4 32 base64 >"$TMP/base64.json"

BODY=""
export BODY # post.lua reads the request body from this file

# Latency percentiles in wrk's --latency output are like "50%  1.23ms".
to_ms() {
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
        else printf "%s", v }'
}

echo
echo "| target | connections | requests/s | p50 ms | p99 ms | non-200 |"
echo "|---|---:|---:|---:|---:|---:|"
run() { # name conns wrk-args...
    name=$1
    conns=$2
    shift 2
    # wrk needs at least one connection per thread.
    threads=$WRK_THREADS
    [ "$conns" -lt "$threads" ] && threads=$conns
    out=$(wrk -t"$threads" -c"$conns" -d"$DURATION" --latency "$@")
    rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
    p50=$(to_ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
    p99=$(to_ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
    bad=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $NF}')
    echo "| $name | $conns | $rps | $p50 | $p99 | ${bad:-0} |"
}
for c in $CONNS; do
    run "GET /health" "$c" "$URL/health"
done
for enc in nested base64; do
    for c in $CONNS; do
        BODY="$TMP/$enc.json"
        run "POST /v1/attention ($enc)" "$c" -s "$HERE/post.lua" "$URL/v1/attention"
    done
done
