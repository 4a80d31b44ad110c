#!/bin/sh
# run.sh BIN [BIN ...] — small-request latency over HTTP (make bench-latency).
#
# For each binary, in ROUNDS interleaved rounds (so load changes on a shared
# machine hit every binary alike), starts it on a free loopback port with the
# model (config defaults, warn-level logs, THREADS compute threads) and
# measures POST /embed with one input of 12 tokens ([CLS] and [SEP] included):
#   1. one connection, one request at a time (wrk -c1): p50/p99 — the
#      single-request latency;
#   1b. sparse requests: open-loop at SPARSE_RATE (default 20) per second,
#      p50/p99 — the latency of a request that finds the service idle, which
#      back-to-back requests (1.) never do: on a VM guest an idle vCPU takes
#      milliseconds to come back to full speed;
#   2. the most it sustains (wrk, MAX_CONNS connections): requests/s;
#   3. open-loop Poisson arrivals at LOAD (default 0.5) of that rate over
#      many connections (openloop.py): p50/p99 from each request's scheduled
#      send time, and p50/p99 of the server's own queue + inference time
#      (its x-queue-time-ms and x-inference-time-ms headers);
#   4. the bound: bench_latency's forward time for batches of 1..64 such
#      requests, fed to queue_bound.py, which simulates the service's
#      scheduler at the open-loop rate with nothing but the forwards — the
#      p99 no scheduler of this kind beats with this engine, so the server's
#      p99 over it is what the server itself adds (measured each round, before
#      the binaries; BENCH_LATENCY names the bench_latency binary, default
#      build/bench_latency; BENCH_LATENCY=none skips it).
# Prints one Markdown row per binary and round, with the 1-minute load
# average, then the medians over the rounds. Loopback only, bounded in time:
# about (4 × DURATION + 4 s) per binary and round, and about 15 s per round
# for the curve.
#
#   bench/latency/run.sh build/attnserve
#   ROUNDS=5 DURATION=5 bench/latency/run.sh /tmp/old/attnserve build/attnserve
set -eu
[ $# -ge 1 ] || { echo "usage: $0 BIN [BIN ...]" >&2; exit 2; }
HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../..")
MODEL=$(realpath "${MODEL:-$ROOT/models/all-MiniLM-L6-v2}")
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-5}
THREADS=${THREADS:-2}
MAX_CONNS=${MAX_CONNS:-16}
LOAD=${LOAD:-0.5}
SPARSE_RATE=${SPARSE_RATE:-20}
BACKEND=${BACKEND:-fused}
BENCH_LATENCY=${BENCH_LATENCY:-$ROOT/build/bench_latency}
# The benchmark's OpenBLAS runs on its best kernels (these machines force
# slower ones through the environment; tests and CI keep them).
unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE

if ! command -v wrk >/dev/null; then
    echo "bench-latency: installing wrk (Debian package)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q --no-install-recommends wrk >&2
fi

TMP=$(mktemp -d)
SERVER=""
cleanup() {
    [ -n "$SERVER" ] && { kill -TERM "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; }
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

# Ten one-piece words: 12 tokens with [CLS] and [SEP] (checked below).
TEXT="the quick brown fox jumps over the lazy dog today"
printf '{"inputs": "%s"}' "$TEXT" >"$TMP/body.json"
echo '{}' >"$TMP/config.json"
export BODY="$TMP/body.json" # read by post.lua

to_ms() { # wrk prints latencies as 1.23us / 4.56ms / 7.89s
    awk -v v="$1" 'BEGIN {
        if (v ~ /us$/) { sub(/us$/, "", v); printf "%.2f", v / 1000 }
        else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.2f", v }
        else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.2f", v * 1000 }
        else printf "%s", v }'
}

start_server() { # BIN
    PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$1" --config "$TMP/config.json" --host=127.0.0.1 --port="$PORT" --model="$MODEL" \
        --backend="$BACKEND" --threads="$THREADS" --log_level=warn >"$TMP/server.log" 2>&1 &
    SERVER=$!
    URL="http://127.0.0.1:$PORT"
    for _ in $(seq 400); do
        curl -sf "$URL/ready" >/dev/null 2>&1 && break
        sleep 0.05
    done
    curl -sf "$URL/ready" >/dev/null || { cat "$TMP/server.log" >&2; exit 1; }
    n=$(curl -sf "$URL/tokenize" -H 'Content-Type: application/json' -d @"$BODY" |
        python3 -c 'import json,sys; print(len(json.load(sys.stdin)[0]))')
    [ "$n" = 12 ] || { echo "bench-latency: the text is $n tokens, not 12" >&2; exit 1; }
}

stop_server() {
    kill -TERM "$SERVER" 2>/dev/null || true
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
}

echo "cores $(nproc), $THREADS compute threads, backend $BACKEND, ${DURATION}s per measurement, load $LOAD of the maximum"
echo
echo "| round | binary | load avg | 1 conn p50 ms | 1 conn p99 ms | sparse p50 ms | sparse p99 ms | max req/s | open-loop req/s | p50 ms | p99 ms | p99 / 1-conn p50 | server p50 ms | server p99 ms | bound p99 ms | server p99 / bound |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
: >"$TMP/rows"
for round in $(seq "$ROUNDS"); do
    : >"$TMP/curve.jsonl"
    if [ "$BENCH_LATENCY" != none ]; then
        for k in 1 2 4 8 16 32 64; do
            "$BENCH_LATENCY" --model "$MODEL" --threads "$THREADS" --backend "$BACKEND" \
                --batch "$k" --reps $((400 / k + 20)) --forward-only --json >>"$TMP/curve.jsonl"
        done
    fi
    for bin in "$@"; do
        start_server "$(realpath "$bin")"
        load=$(cut -d' ' -f1 /proc/loadavg)
        wrk -t1 -c1 -d1s -s "$ROOT/bench/http/post.lua" "$URL/embed" >/dev/null # warm-up
        one=$(wrk -t1 -c1 -d"${DURATION}s" --latency -s "$ROOT/bench/http/post.lua" "$URL/embed")
        p50=$(to_ms "$(echo "$one" | awk '$1 == "50%" {print $2}')")
        p99=$(to_ms "$(echo "$one" | awk '$1 == "99%" {print $2}')")
        sparse=$(python3 "$HERE/openloop.py" --url "$URL/embed" --body "$BODY" \
            --rate "$SPARSE_RATE" --duration "$DURATION" --conns 4)
        max=$(wrk -t2 -c"$MAX_CONNS" -d"${DURATION}s" -s "$ROOT/bench/http/post.lua" "$URL/embed" |
            awk '/^Requests\/sec/ {print $2}')
        rate=$(awk -v m="$max" -v l="$LOAD" 'BEGIN {printf "%.1f", m * l}')
        ol=$(python3 "$HERE/openloop.py" --url "$URL/embed" --body "$BODY" --rate "$rate" \
            --duration "$DURATION" --conns 32)
        stop_server
        bound=nan
        if [ -s "$TMP/curve.jsonl" ]; then
            bound=$(python3 "$HERE/queue_bound.py" --curve-jsonl "$TMP/curve.jsonl" \
                --rate "$(echo "$ol" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rate"])')" |
                python3 -c 'import json,sys; print(json.load(sys.stdin)["p99_ms"])')
        fi
        row=$(echo "$ol" | python3 -c '
import json, sys
o = json.load(sys.stdin)
r, b, load, p50, p99, mx, bound, sparse = sys.argv[1:9]
sp = json.loads(sparse)
ratio = o["p99_ms"] / float(p50)
bound = float(bound)
print("| %s | %s | %s | %s | %s | %.2f | %.2f | %s | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (r, b, load, p50, p99, sp["p50_ms"], sp["p99_ms"], mx, o["rate"], o["p50_ms"], o["p99_ms"], ratio, o["server_p50_ms"], o["server_p99_ms"], bound, o["server_p99_ms"] / bound))
if o["errors"] or sp["errors"]:
    print("bench-latency: %d requests failed" % (o["errors"] + sp["errors"]), file=sys.stderr)
' "$round" "$bin" "$load" "$p50" "$p99" "$max" "$bound" "$sparse")
        echo "$row"
        echo "$row" >>"$TMP/rows"
    done
done
echo
echo "Medians over $ROUNDS rounds:"
echo
python3 - "$TMP/rows" <<'PY'
import statistics, sys
rows = [l.strip().strip("|").split("|") for l in open(sys.argv[1]) if l.strip()]
by = {}
for r in rows:
    by.setdefault(r[1].strip(), []).append([float(x) for x in r[2:]])
print("| binary | load avg | 1 conn p50 ms | 1 conn p99 ms | sparse p50 ms | sparse p99 ms | max req/s | open-loop req/s | p50 ms | p99 ms | p99 / 1-conn p50 | server p50 ms | server p99 ms | bound p99 ms | server p99 / bound |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for b, v in by.items():
    med = [statistics.median(c) for c in zip(*v)]
    print("| %s | %.1f | %.2f | %.2f | %.2f | %.2f | %.0f | %.0f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f |" % (b, *med))
PY
