#!/usr/bin/env bash
# tests/deploy/run.sh [BIN] — checks deploy/ and the Dockerfile (see
# test_manifests.py) with Debian's python3 and haproxy, installed when
# missing. With BIN (default build/attnserve) built and the model fetched, the
# ConfigMap's config is also fed to the real binary and its /info worst-case
# memory compared with the Deployment's limit.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ATTNSERVE_BIN=${1:-$ROOT/build/attnserve}

need=""
command -v haproxy >/dev/null 2>&1 || need="$need haproxy"
for m in yaml:python3-yaml pytest:python3-pytest requests:python3-requests; do
    /usr/bin/python3 -c "import ${m%%:*}" 2>/dev/null || need="$need ${m#*:}"
done
if [ -n "$need" ]; then
    echo "deploy-test: installing:$need" >&2
    SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
    $SUDO apt-get update -q >/dev/null
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $need >/dev/null
fi
exec timeout -k 10 180 /usr/bin/python3 -m pytest -p no:cacheprovider -q -rs "$ROOT/tests/deploy"
