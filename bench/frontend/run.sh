#!/bin/sh
# run.sh BIN MODEL_DIR — the HTTP front end's cost without the engine's
# (make bench-frontend): POST /v1/embeddings under load, answered by the
# `instant` test engine (build/test-engines/instant.so: a hash of the token
# ids, no encoder), and the same load on the real cpu engine in fp32 beside
# it. Reports embeddings/s and the service's own CPU time per embedding
# (utime + stime from /proc/PID/stat around each timed window), which wrk
# sharing the cores does not blur: the server's CPU time from an idle
# reading to an idle reading, over the /v1/embeddings answers its own
# /metrics counted between them. A report, not a test.
#
# Cells: codec workers (WORKERS: "unset" passes no setting; N passes
# --codec_workers=N, and a binary without that setting gets the cell
# "n/a (setting absent)"; by default "1 2", and "unset 1 2" where the
# setting is absent, so an older binary still gives its numbers), float and base64 answers, 1 and 32 sentences of
# about 20 to 40 tokens a request, CONNS keep-alive connections, direct and through
# haproxy (deploy/haproxy.cfg with loopback binds, as tests/cluster runs it;
# "n/a (haproxy absent)" without it). The cpu engine runs fewer cells (float,
# direct). ROUNDS rounds, each running every cell once for DURATION seconds
# (CPU_DURATION for the cpu engine) after a warm-up per server start;
# report.py takes the medians and ranges and prints the targets met or
# missed. Raw records and the report go to OUT.
#
#   bench/frontend/run.sh build/attnserve models/all-MiniLM-L6-v2
#   ROUNDS=5 DURATION=10 bench/frontend/run.sh build/attnserve models/all-MiniLM-L6-v2
set -eu
BIN=$(realpath "${1:?usage: $0 BIN MODEL_DIR}")
MODEL=$(realpath "${2:?usage: $0 BIN MODEL_DIR}")
HERE=$(dirname "$(realpath "$0")")
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-3}
# The cpu engine answers a hundredth as many: a longer window, or a cell is
# a handful of requests.
CPU_DURATION=${CPU_DURATION:-$((DURATION * 3))}
WARMUP=${WARMUP:-1}
CONNS=${CONNS:-64}
WORKERS=${WORKERS:-}
WRK_THREADS=${WRK_THREADS:-2}
OUT=${OUT:-$(dirname "$BIN")/bench-frontend}
PLUGINS=$(dirname "$BIN")/test-engines
[ -f "$PLUGINS/instant.so" ] || { echo "bench-frontend: no $PLUGINS/instant.so (make builds it)" >&2; exit 2; }

if ! command -v wrk >/dev/null; then
    echo "bench-frontend: installing wrk (Debian package)" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get install -y -q --no-install-recommends wrk >&2
fi
HAPROXY="absent (scripts/install-deps.sh installs it)"
command -v haproxy >/dev/null && HAPROXY=$(haproxy -v | head -n 1)
CODEC=false
"$BIN" --help 2>&1 | grep -q -- '--codec_workers' && CODEC=true
if [ -z "$WORKERS" ]; then
    WORKERS="unset 1 2"
    [ "$CODEC" = true ] && WORKERS="1 2"
fi

mkdir -p "$OUT"
TMP=$(mktemp -d)
CELLS="$OUT/cells.jsonl"
: >"$CELLS"
SERVER=""
PROXY=""
stop_all() {
    for p in $PROXY $SERVER; do
        kill -TERM "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    SERVER=""
    PROXY=""
}
cleanup() {
    stop_all
    rm -rf "$TMP"
}
trap cleanup EXIT INT TERM

free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_ok() { # URL: up to 30 s for a 200
    for _ in $(seq 300); do
        curl -sf "$1" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    return 1
}

# The CPU's name, with its family and model numbers where the name alone
# says little (a VM's "AMD EPYC").
cpu_model() {
    awk -F': *' '$1 ~ /^model name/ && !n {n = $2} $1 ~ /^cpu family/ && !f {f = $2}
        $1 ~ /^model[ \t]*$/ && !m {m = $2}
        END {printf "%s (family %s, model %s)", n, f, m}' /proc/cpuinfo
}

for enc in float base64; do
    for n in 1 32; do
        python3 "$HERE/prep.py" body "$n" "$enc" >"$TMP/body-$enc-$n.json"
    done
done
echo '{}' >"$TMP/config.json"

printf '{"kind": "run", "date": "%s", "cpu": "%s", "cores": %d, "loadavg_before": "%s", "command": "ROUNDS=%s DURATION=%s CPU_DURATION=%s CONNS=%s WORKERS=\\"%s\\" bench/frontend/run.sh %s %s", "rounds": %s, "duration": "%ss (the cpu engine %ss)", "connections": %s, "haproxy": "%s", "codec_workers": %s}\n' \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(cpu_model)" \
    "$(nproc)" "$(cut -d' ' -f1-3 /proc/loadavg)" "$ROUNDS" "$DURATION" "$CPU_DURATION" "$CONNS" \
    "$WORKERS" "$1" "$2" "$ROUNDS" "$DURATION" "$CPU_DURATION" "$CONNS" "$HAPROXY" "$CODEC" >>"$CELLS"

# The cells of one engine: "encoding batch via" lines.
cells_of() {
    if [ "$1" = instant ]; then
        for enc in float base64; do for n in 1 32; do for via in direct haproxy; do
            echo "$enc $n $via"
        done; done; done
    else
        echo "float 1 direct"
        echo "float 32 direct"
    fi
}

record_na() { # round engine workers enc n via why
    printf '{"kind": "cell", "round": %s, "engine": "%s", "workers": "%s", "encoding": "%s", "batch": %s, "via": "%s", "status": "%s"}\n' \
        "$@" >>"$CELLS"
}

start_server() { # engine workers
    PORT=$(free_port)
    set -- "$1" "$2"
    extra=""
    [ "$2" = unset ] || extra="--codec_workers=$2"
    plugin_dir=none
    [ "$1" = instant ] && plugin_dir=$PLUGINS
    # shellcheck disable=SC2086 # extra is one flag or none
    "$BIN" --config "$TMP/config.json" --host=127.0.0.1 --port="$PORT" --model="$MODEL" \
        --engine="$1" --precision=fp32 --plugin_dir="$plugin_dir" --log_level=warn \
        --max_connections=1024 $extra >"$TMP/server.log" 2>&1 &
    SERVER=$!
    wait_ok "http://127.0.0.1:$PORT/ready" || { cat "$TMP/server.log" >&2; exit 1; }
    if [ "${HAPROXY#absent}" = "$HAPROXY" ]; then
        PROXY_PORT=$(free_port)
        python3 "$HERE/prep.py" haproxy "$PROXY_PORT" "$(free_port)" "$PORT" >"$TMP/haproxy.cfg"
        haproxy -db -f "$TMP/haproxy.cfg" >/dev/null 2>&1 &
        PROXY=$!
        wait_ok "http://127.0.0.1:$PROXY_PORT/ready" || { echo "bench-frontend: haproxy did not start" >&2; exit 1; }
    fi
}

# Until the server's CPU time stands still: the batch running when wrk
# stopped (its clients gone, the queued rest cancelled) is finished before
# a reading, so no window pays for another's work.
wait_idle() {
    prev=""
    for _ in $(seq 120); do
        cur=$(awk '{print $14 + $15}' "/proc/$SERVER/stat")
        [ "$cur" = "$prev" ] && return 0
        prev=$cur
        sleep 0.25
    done
}
# The server's count of /v1/embeddings answered 200.
answered() {
    curl -sf "http://127.0.0.1:$PORT/metrics" |
        awk '/^attnserve_http_requests_total\{route="\/v1\/embeddings",status="200"\}/ {print $2}'
}

wrk_run() { # seconds url: wrk's output
    wrk -t"$WRK_THREADS" -c"$CONNS" -d"$1"s --timeout 30s -s "$HERE/../http/post.lua" "$2"
}

export BODY
for round in $(seq "$ROUNDS"); do
    for engine in instant cpu; do
        for w in $WORKERS; do
            if [ "$w" != unset ] && [ "$CODEC" = false ]; then
                cells_of "$engine" | while read -r enc n via; do
                    record_na "$round" "$engine" "$w" "$enc" "$n" "$via" "n/a (setting absent)"
                done
                continue
            fi
            start_server "$engine" "$w"
            warmed=""
            cells_of "$engine" >"$TMP/cells"
            while read -r enc n via; do
                if [ "$via" = haproxy ] && [ -z "$PROXY" ]; then
                    record_na "$round" "$engine" "$w" "$enc" "$n" "$via" "n/a (haproxy absent)"
                    continue
                fi
                url="http://127.0.0.1:$PORT/v1/embeddings"
                [ "$via" = haproxy ] && url="http://127.0.0.1:$PROXY_PORT/v1/embeddings"
                BODY="$TMP/body-$enc-$n.json"
                curl -sf "$url" -H 'Content-Type: application/json' --data-binary @"$BODY" >/dev/null ||
                    { echo "bench-frontend: POST $url failed" >&2; cat "$TMP/server.log" >&2; exit 1; }
                [ -n "$warmed" ] || wrk_run "$WARMUP" "$url" >/dev/null
                warmed=1
                wait_idle
                before=$(cat "/proc/$SERVER/stat")
                served_before=$(answered)
                window=$DURATION
                [ "$engine" = cpu ] && window=$CPU_DURATION
                out=$(wrk_run "$window" "$url")
                wait_idle
                served_after=$(answered)
                after=$(cat "/proc/$SERVER/stat")
                requests=$(echo "$out" | awk '/ requests in / {print $1}')
                seconds=$(echo "$out" | awk '/ requests in / {v = $4; sub(/,$/, "", v);
                    if (v ~ /ms$/) { sub(/ms$/, "", v); v /= 1000 } else if (v ~ /m$/) { sub(/m$/, "", v); v *= 60 }
                    else sub(/s$/, "", v); print v}')
                bad=$(echo "$out" | awk '/Non-2xx or 3xx responses/ {print $NF}')
                printf '{"kind": "cell", "round": %s, "engine": "%s", "workers": "%s", "encoding": "%s", "batch": %s, "via": "%s", "status": "ok", "requests": %s, "answered": %s, "seconds": %s, "non2xx": %s, "clk_tck": %s, "stat_before": "%s", "stat_after": "%s"}\n' \
                    "$round" "$engine" "$w" "$enc" "$n" "$via" "$requests" "$((served_after - served_before))" "$seconds" "${bad:-0}" \
                    "$(getconf CLK_TCK)" "$before" "$after" >>"$CELLS"
            done <"$TMP/cells"
            stop_all
        done
    done
    echo "bench-frontend: round $round of $ROUNDS done" >&2
done
printf '{"kind": "end", "loadavg_after": "%s"}\n' "$(cut -d' ' -f1-3 /proc/loadavg)" >>"$CELLS"
python3 "$HERE/report.py" "$CELLS" | tee "$OUT/report.md"
