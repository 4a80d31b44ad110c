#!/usr/bin/env bash
# tests/cluster/run.sh [BIN] — three attnserve instances (BIN, default
# build/attnserve) and haproxy on 127.0.0.1, with failover, a rolling restart
# and throughput; see test_cluster.py. Installs haproxy and the Python
# packages from Debian when missing. Loopback only; bounded (timeout below);
# every process the test starts is ended when it ends.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(realpath "${1:-$ROOT/build/attnserve}")

need=""
command -v haproxy >/dev/null 2>&1 || need="$need haproxy"
for m in requests:python3-requests pytest:python3-pytest; do
    /usr/bin/python3 -c "import ${m%%:*}" 2>/dev/null || need="$need ${m#*:}"
done
if [ -n "$need" ]; then
    echo "cluster-test: installing:$need" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $need >/dev/null
fi
[ -x "$BIN" ] || { echo "cluster-test: FAIL: no binary $BIN (run make)" >&2; exit 1; }
[ -f "$ROOT/models/all-MiniLM-L6-v2/model.safetensors" ] ||
    { echo "cluster-test: FAIL: no model (run make model)" >&2; exit 1; }

export ATTNSERVE_BIN=$BIN
# pytest runs in its own process group under timeout: on expiry the whole
# group (pytest, the instances, haproxy) gets SIGTERM, then SIGKILL.
exec timeout -k 10 300 /usr/bin/python3 -m pytest -p no:cacheprovider -s -v \
    "$ROOT/tests/cluster/test_cluster.py"
