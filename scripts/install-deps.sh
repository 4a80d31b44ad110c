#!/bin/sh
# install-deps.sh — installs every Debian package that attnserve's build, tests
# and service need. Idempotent: when everything is present it only checks.
# libdnnl-dev and libxsmm-dev are for build/bench_gemm only (the bf16 GEMM is
# compared with them; the service links neither). haproxy is for the tests:
# make test sends its raw framing cases through it (without it they are not
# run), and the cluster test balances over it. prometheus is for its
# promtool only: the metric tests run `promtool check metrics` on /metrics.
# Its package enables and starts a Prometheus server where systemd runs;
# when this script installed it, that service is disabled and stopped again.
# zlib1g-dev is for the tests and benchmarks only: the large goldens under
# tests/golden are gzipped (tests/golden/golden_io.c reads them).
# chromium is for the tests only: test_docs_ui.py drives the /docs page in
# headless Chromium (through its DevTools protocol, so no chromium-driver).
# python3-pip downloads the pinned Swagger UI wheel that
# scripts/get-swagger-ui.sh unpacks for the build (the last step here, run
# whether or not a package was missing).
set -eu
HERE=$(dirname "$0")

PACKAGES="build-essential pkg-config
libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev libpcre2-dev zlib1g-dev
curl ca-certificates
libcriterion-dev
clang libclang-rt-14-dev valgrind linux-perf
cppcheck clang-format
python3-pytest python3-requests python3-venv python3-pip haproxy
chromium
libdnnl-dev libxsmm-dev prometheus"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
# Root only when the files are not there yet.
swagger_ui() { "$HERE/get-swagger-ui.sh" --check || $SUDO "$HERE/get-swagger-ui.sh"; }
if [ -z "$missing" ]; then
    swagger_ui
    exit 0
fi

echo "install-deps: installing:$missing"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
case " $missing " in
*" prometheus "*)
    if [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
    ;;
esac
swagger_ui
