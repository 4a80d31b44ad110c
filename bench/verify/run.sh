#!/bin/sh
# run.sh BIN MODEL_DIR — the cost of shadow verification (make bench-verify):
# /v1/embeddings throughput with verify_sample_rate 0 (off), 0.001 (the
# default) and 1 (every batch checked: the worst case), in one run against
# one server. The rate is changed by SIGHUP between runs (it is reloadable),
# and the rates are interleaved REPS times (0, 0.001, 1, 0, 0.001, 1, ...) so
# drift on a shared machine falls on all of them alike; medians are printed.
#
# Each run is wrk with CONNS keep-alive connections for DURATION posting one
# request of BATCH short texts (the golden corpus's first texts, 5-20
# tokens). Loopback only; warn-level logs so request lines are not measured.
#
#   REPS=5 DURATION=5s CONNS=8 BATCH=16 bench/verify/run.sh build/attnserve models/all-MiniLM-L6-v2
set -eu
BIN=$(realpath "${1:?usage: $0 BIN MODEL_DIR}")
MODEL=$(realpath "${2:?usage: $0 BIN MODEL_DIR}")
HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../..")
REPS=${REPS:-5}
DURATION=${DURATION:-5s}
CONNS=${CONNS:-8}
BATCH=${BATCH:-16}
BACKEND=${BACKEND:-fused}
THREADS=${THREADS:-0}
RATES=${RATES:-"0 0.001 1"}

if ! command -v wrk >/dev/null; then # as bench/http/run.sh does
    echo "bench-verify: installing wrk (Debian package)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q --no-install-recommends wrk >&2
fi

TMP=$(mktemp -d)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
config() { # config RATE
    printf '{"host": "127.0.0.1", "port": %s, "model": "%s", "backend": "%s", "threads": %s,
  "log_level": "warn", "max_connections": 256, "verify_sample_rate": %s}\n' \
        "$PORT" "$MODEL" "$BACKEND" "$THREADS" "$1" >"$TMP/config.json"
}
config 0
"$BIN" --config "$TMP/config.json" >"$TMP/server.log" 2>&1 &
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

export BODY="$TMP/body.json"
/usr/bin/python3 - "$ROOT/tests/golden" "$BATCH" >"$BODY" <<'EOF'
import json, os, sys
sys.path.insert(0, sys.argv[1])
import golden_io
golden = golden_io.load(os.path.join(sys.argv[1], "embeddings.json.gz"))
cases = [c["text"] for c in golden["mean_normalized"] if c["text"] and len(c["ids"]) <= 20]
n = int(sys.argv[2])
print(json.dumps({"input": (cases * (n // len(cases) + 1))[:n]}))
EOF
curl -sf "$URL/v1/embeddings" -H 'Content-Type: application/json' --data-binary @"$BODY" \
    >/dev/null || { echo "bench-verify: POST failed" >&2; cat "$TMP/server.log" >&2; exit 1; }

checked() { curl -sf "$URL/metrics" | awk -v b="$BACKEND" \
    '$1 == "attnserve_verify_batches_total{backend=\"" b "\"}" {print $2}'; }
skipped() { curl -sf "$URL/metrics" | awk '$1 == "attnserve_verify_skipped_total" {print $2}'; }
cpu() { curl -sf "$URL/metrics" | awk '$1 == "process_cpu_seconds_total" {print $2}'; }

echo "rep rate requests_per_s non200 checks skipped requests cpu_s" >"$TMP/runs"
for rep in $(seq "$REPS"); do
    for rate in $RATES; do
        config "$rate"
        kill -HUP "$SERVER"
        # The server logs at warn, so wait on the setting itself in /info.
        for _ in $(seq 100); do
            curl -sf "$URL/info" | /usr/bin/python3 -c 'import json, sys
sys.exit(json.load(sys.stdin)["verification"]["sample_rate"] != float(sys.argv[1]))' "$rate" &&
                break
            sleep 0.05
        done
        sleep 1 # a check of the previous run's last batch finishes first
        before=$(checked)
        skipped_before=$(skipped)
        cpu_before=$(cpu)
        out=$(wrk -t2 -c"$CONNS" -d"$DURATION" --timeout 30s -s "$ROOT/bench/http/post.lua" \
            "$URL/v1/embeddings")
        rps=$(echo "$out" | awk '/^Requests\/sec/ {print $2}')
        bad=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $NF}')
        after=$(checked)
        cpu_after=$(cpu)
        nreq=$(echo "$out" | awk '/requests in/ {print $1}')
        echo "$rep $rate $rps ${bad:-0} $((after - before)) $(($(skipped) - skipped_before))" \
            "$nreq $(awk -v a="$cpu_after" -v b="$cpu_before" 'BEGIN {print a - b}')" >>"$TMP/runs"
    done
done

/usr/bin/python3 - "$TMP/runs" "$BATCH" <<'EOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]).read().splitlines()[1:]]
batch = int(sys.argv[2])
rates = []
for r in rows:
    if r[1] not in rates:
        rates.append(r[1])
base = statistics.median(float(r[2]) for r in rows if r[1] == rates[0])
# Throughput on a shared machine swings with the neighbours' load; the
# service's own CPU seconds per request (process_cpu_seconds_total over the
# run, checker thread included) is the steadier measure of what
# verification costs.
print("| verify_sample_rate | runs (requests/s) | median requests/s | median inputs/s | vs rate %s | median CPU ms / request | vs rate %s | checks run | skipped (busy) | non-200 |" % (rates[0], rates[0]))
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
cpu_base = statistics.median(1000 * float(r[7]) / int(r[6]) for r in rows if r[1] == rates[0])
for rate in rates:
    rs = [r for r in rows if r[1] == rate]
    med = statistics.median(float(r[2]) for r in rs)
    cpu = statistics.median(1000 * float(r[7]) / int(r[6]) for r in rs)
    print("| %s | %s | %.1f | %.0f | %+.1f%% | %.1f | %+.1f%% | %d | %d | %d |" % (
        rate, ", ".join("%.1f" % float(r[2]) for r in rs), med, med * batch,
        100 * (med / base - 1), cpu, 100 * (cpu / cpu_base - 1), sum(int(r[4]) for r in rs),
        sum(int(r[5]) for r in rs), sum(int(r[3]) for r in rs)))
EOF
