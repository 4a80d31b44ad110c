#!/bin/sh
# check.sh BIN MODEL_DIR — kernels are visible to a standard profiler
# (make perf-check; issue 7 §3). Serves BIN with the fused backend, keeps it
# busy with /v1/attention requests, runs the recipe of docs/safety-net.md
#
#     perf record -g -p "$(pidof attnserve)" -- sleep 10 && perf report --no-children
#
# (for PERF_SECONDS, default 5) and checks the report: the fused kernel's
# functions for this CPU's SIMD path (fused_task_avx512, fused_blocks_avx512,
# ...: their names end in the path, _avx512 / _avx2 / _portable) hold at
# least MIN_KERNEL_PCT of the samples, and samples in attnserve's own
# code that perf cannot name ("[unknown]" symbols of the attnserve DSO) stay
# under MAX_UNKNOWN_PCT — frame pointers and symbols are in the default build
# and there is no JIT code. Exits 0 when both hold, 1 otherwise, 77 (skip)
# when perf cannot record here (no perf, or perf_event_paranoid forbids it).
set -eu
BIN=$(realpath "${1:?usage: $0 BIN MODEL_DIR}")
MODEL=$(realpath "${2:?usage: $0 BIN MODEL_DIR}")
SECONDS_=${PERF_SECONDS:-5}
MIN_KERNEL_PCT=${MIN_KERNEL_PCT:-20}
MAX_UNKNOWN_PCT=${MAX_UNKNOWN_PCT:-2}

command -v perf >/dev/null || { echo "perf-check: no perf installed (linux-perf)" >&2; exit 77; }
TMP=$(mktemp -d)
PORT=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
echo '{}' >"$TMP/config.json"
"$BIN" --config "$TMP/config.json" --host=127.0.0.1 --port="$PORT" --model="$MODEL" \
    --backend=fused --threads=2 --log_level=warn >"$TMP/server.log" 2>&1 &
SERVER=$!
LOAD=""
cleanup() {
    [ -n "$LOAD" ] && kill "$LOAD" 2>/dev/null || true
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
SIMD=$(curl -sf "$URL/info" | /usr/bin/python3 -c 'import json, sys; print(json.load(sys.stdin)["simd"])')

# Load: attention over 4096 tokens, 1 head of 32 (2.1 GFLOP, a 2 MB body a request):
# mostly kernel time, little JSON decoding.
/usr/bin/python3 - "$URL" "$TMP/stop" <<'PY' &
import base64, json, os, random, struct, sys, threading, urllib.request
url, stop = sys.argv[1], sys.argv[2]
rng = random.Random(1)
def t():
    n = 4096 * 1 * 32
    return {"shape": [4096, 1, 32],
            "data": base64.b64encode(struct.pack("<%df" % n, *(rng.uniform(-1, 1) for _ in range(n)))).decode()}
body = json.dumps({"q": t(), "k": t(), "v": t()}).encode()
def loop():
    while not os.path.exists(stop):
        req = urllib.request.Request(url + "/v1/attention", data=body,
                                     headers={"Content-Type": "application/json"})
        urllib.request.urlopen(req, timeout=60).read()
threads = [threading.Thread(target=loop) for _ in range(2)]
for th in threads:
    th.start()
for th in threads:
    th.join()
PY
LOAD=$!
sleep 1

if ! perf record -q -g -o "$TMP/perf.data" -p "$SERVER" -- sleep "$SECONDS_" >"$TMP/record.log" 2>&1; then
    echo "perf-check: perf record cannot run here (perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null)):" >&2
    cat "$TMP/record.log" >&2
    exit 77
fi
touch "$TMP/stop"
wait "$LOAD" || true
LOAD=""

perf report -i "$TMP/perf.data" --stdio --no-children --sort dso,symbol 2>/dev/null |
    grep -v '^#' | grep '%' >"$TMP/report.txt" || true
echo "perf-check: top of the report (self time, dso and symbol):"
head -12 "$TMP/report.txt"
/usr/bin/python3 - "$TMP/report.txt" "$SIMD" "$MIN_KERNEL_PCT" "$MAX_UNKNOWN_PCT" "$(basename "$BIN")" <<'PY'
import re, sys
path, simd, min_kernel, max_unknown, dso = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
kernel = unknown = 0.0
for line in open(path):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[[.kujJ]\]\s+(\S+)", line)
    if not m:
        continue
    pct, d, sym = float(m.group(1)), m.group(2), m.group(3)
    # The kernel's functions carry the path's suffix (fused_task_avx512,
    # fused_blocks_avx512, ...); GCC may add a clone suffix (.isra.0).
    base = re.sub(r"\.(isra|constprop|part|cold)\.\d+$", "", sym)
    if base.startswith("fused_") and base.endswith("_" + simd):
        kernel += pct
    if d == dso and (sym.startswith("0x") or sym == "[unknown]"):
        unknown += pct
print("perf-check: fused_*_%s %.1f%% of samples (need >= %g), unnamed %s code %.2f%% (need < %g)"
      % (simd, kernel, min_kernel, dso, unknown, max_unknown))
sys.exit(0 if kernel >= min_kernel and unknown < max_unknown else 1)
PY
