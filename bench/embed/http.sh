#!/bin/sh
# http.sh BIN MODEL_DIR INPUTS_DIR — embeddings through the server under
# concurrent load (the HTTP part of make bench-embed).
#
# Starts BIN on a free loopback port with the model (warn-level logs, so
# per-request log lines are not measured) and runs wrk (Debian package; the
# script installs it if missing) with bench/http/post.lua against
# POST /v1/embeddings: one request = BATCH generated inputs of LEN tokens, taken
# from INPUTS_DIR/inputs-LEN.jsonl (bench_embed --dump-inputs), float encoding,
# at each of CONNS keep-alive connections for DURATION. Prints one Markdown row
# per run: requests/s, inputs/s, p50/p99 latency, non-200 answers. The server
# batches concurrent requests together; wrk runs on the same cores.
#
#   CASES="12x1 64x1 12x8" CONNS="1 16 64" DURATION=5s bench/embed/http.sh BIN MODEL DIR
set -eu
BIN=$(realpath "${1:?usage: $0 BIN MODEL_DIR INPUTS_DIR}")
MODEL=$(realpath "${2:?usage: $0 BIN MODEL_DIR INPUTS_DIR}")
INPUTS=$(realpath "${3:?usage: $0 BIN MODEL_DIR INPUTS_DIR}")
HERE=$(dirname "$(realpath "$0")")
CASES=${CASES:-"12x1 64x1 12x8 256x1"}
CONNS=${CONNS:-"1 16 64"}
DURATION=${DURATION:-5s}
BACKEND=${BACKEND:-fused}
THREADS=${THREADS:-0}
WRK_THREADS=${WRK_THREADS:-2}

if ! command -v wrk >/dev/null; then
    echo "bench-embed: installing wrk (Debian package)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q --no-install-recommends wrk >&2
fi

TMP=$(mktemp -d)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '{}' >"$TMP/config.json"
"$BIN" --config "$TMP/config.json" --host=127.0.0.1 --port="$PORT" --model="$MODEL" \
    --backend="$BACKEND" --threads="$THREADS" --log_level=warn --max_connections=1024 \
    >"$TMP/server.log" 2>&1 &
SERVER=$!
cleanup() {
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

URL="http://127.0.0.1:$PORT"
for _ in $(seq 200); do
    curl -sf "$URL/ready" >/dev/null 2>&1 && break
    sleep 0.05
done
curl -sf "$URL/ready" >/dev/null || { cat "$TMP/server.log" >&2; exit 1; }

to_ms() { # wrk prints latencies as 1.23us / 4.56ms / 7.89s
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.2f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.0f", v * 1000 }
        else printf "%s", v }'
}

echo "| request | connections | requests/s | inputs/s | p50 ms | p99 ms | non-200 |"
echo "|---|---:|---:|---:|---:|---:|---:|"
export BODY="$TMP/body.json"
for case in $CASES; do
    len=${case%x*}
    batch=${case#*x}
    [ -f "$INPUTS/inputs-$len.jsonl" ] || { echo "http: no $INPUTS/inputs-$len.jsonl" >&2; continue; }
    python3 -c 'import json, sys
s = json.loads(open(sys.argv[1]).readline())
print(json.dumps({"input": s["texts"][:int(sys.argv[2])], "model": "all-MiniLM-L6-v2"}))' \
        "$INPUTS/inputs-$len.jsonl" "$batch" >"$BODY"
    curl -sf "$URL/v1/embeddings" -H 'Content-Type: application/json' --data-binary @"$BODY" \
        >/dev/null || { echo "http: POST /v1/embeddings failed" >&2; cat "$TMP/server.log" >&2; exit 1; }
    for conns in $CONNS; do
        threads=$WRK_THREADS
        [ "$conns" -lt "$threads" ] && threads=$conns
        out=$(wrk -t"$threads" -c"$conns" -d"$DURATION" --timeout 30s --latency \
            -s "$HERE/../http/post.lua" "$URL/v1/embeddings")
        rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
        p50=$(to_ms "$(echo "$out" | awk '$1 == "50%" {print $2}')")
        p99=$(to_ms "$(echo "$out" | awk '$1 == "99%" {print $2}')")
        bad=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $NF}')
        ips=$(awk -v r="$rps" -v b="$batch" 'BEGIN { printf "%.1f", r * b }')
        echo "| $batch × $len tokens | $conns | $rps | $ips | $p50 | $p99 | ${bad:-0} |"
    done
done
