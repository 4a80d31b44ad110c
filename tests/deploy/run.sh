#!/usr/bin/env bash
# tests/deploy/run.sh [BIN] — checks deploy/ and the Dockerfile (see
# test_manifests.py) with Debian's python3 and haproxy, installed when
# missing. With BIN (default build/attnserve) built and the model fetched, the
# ConfigMap's config is also fed to the real binary and its /info worst-case
# memory compared with the Deployment's limit (and the InferenceService's:
# test_kserve_manifests.py), and two instances are run behind the vLLM
# router on 127.0.0.1 (test_vllm_router.py).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
export ATTNSERVE_BIN=$(realpath "${1:-$ROOT/build/attnserve}")

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
# kubernetes-validate (PyPI, pinned) carries the official Kubernetes schemas;
# jsonschema, which it validates with, is pinned too, since KServe's CRD
# schema (test_kserve_manifests.py) is validated with it directly. Both are
# installed once into a cache outside the repository.
KV_VERSION=1.37.0
JSONSCHEMA_VERSION=4.26.0
KV_DIR=${ATTNSERVE_DEPLOY_PYDEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/attnserve/kubernetes-validate-$KV_VERSION-jsonschema-$JSONSCHEMA_VERSION}
if ! PYTHONPATH=$KV_DIR /usr/bin/python3 -c 'import kubernetes_validate, jsonschema' 2>/dev/null; then
    /usr/bin/python3 -m pip --version >/dev/null 2>&1 || {
        SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
        $SUDO apt-get update -q >/dev/null
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends python3-pip >/dev/null
    }
    echo "deploy-test: installing kubernetes-validate $KV_VERSION and jsonschema $JSONSCHEMA_VERSION into $KV_DIR" >&2
    rm -rf "$KV_DIR.partial"
    timeout 600 /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
        --target "$KV_DIR.partial" "kubernetes-validate==$KV_VERSION" "jsonschema==$JSONSCHEMA_VERSION" 2>&1 | grep -v 'as the .root. user' >&2 || true
    PYTHONPATH=$KV_DIR.partial /usr/bin/python3 -c "import kubernetes_validate, importlib.metadata as m
assert m.version('jsonschema') == '$JSONSCHEMA_VERSION', m.version('jsonschema')" ||
        { echo "deploy-test: FAIL: kubernetes-validate or jsonschema did not install" >&2; exit 1; }
    rm -rf "$KV_DIR" && mv "$KV_DIR.partial" "$KV_DIR"
fi
export ATTNSERVE_DEPLOY_PYDEPS_DIR=$KV_DIR
# vllm-router (PyPI, pinned): the vLLM project's router, a Rust extension
# with a Python launcher (test_vllm_router.py). Installed without its
# dependencies (fastapi, uvicorn, aiohttp: only its Python debugging balancer
# imports them; the test starts the Rust router directly), 70 MB, once, into
# a cache outside the repository.
ROUTER_VERSION=0.1.17
ROUTER_DIR=${ATTNSERVE_DEPLOY_ROUTER:-${XDG_CACHE_HOME:-$HOME/.cache}/attnserve/vllm-router-$ROUTER_VERSION}
if ! PYTHONPATH=$ROUTER_DIR /usr/bin/python3 -c 'import vllm_router_rs' 2>/dev/null; then
    echo "deploy-test: installing vllm-router $ROUTER_VERSION into $ROUTER_DIR" >&2
    rm -rf "$ROUTER_DIR.partial"
    timeout 600 /usr/bin/python3 -m pip install -q --disable-pip-version-check --no-warn-script-location \
        --no-deps --target "$ROUTER_DIR.partial" "vllm-router==$ROUTER_VERSION" 2>&1 | grep -v 'as the .root. user' >&2 || true
    PYTHONPATH=$ROUTER_DIR.partial /usr/bin/python3 -c 'import vllm_router_rs' ||
        { echo "deploy-test: FAIL: vllm-router did not install" >&2; exit 1; }
    rm -rf "$ROUTER_DIR" && mv "$ROUTER_DIR.partial" "$ROUTER_DIR"
fi
export ATTNSERVE_DEPLOY_ROUTER_DIR=$ROUTER_DIR
exec timeout -k 10 180 /usr/bin/python3 -m pytest -p no:cacheprovider -q -rs "$ROOT/tests/deploy"
