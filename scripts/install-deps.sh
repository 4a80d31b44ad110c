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
set -eu

PACKAGES="build-essential pkg-config
libmicrohttpd-dev libjansson-dev libuv1-dev libopenblas-dev libpcre2-dev zlib1g-dev
curl ca-certificates
libcriterion-dev
clang libclang-rt-14-dev valgrind linux-perf
cppcheck clang-format
python3-pytest python3-requests python3-venv haproxy
libdnnl-dev libxsmm-dev prometheus"

missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
        missing="$missing $p"
done
[ -z "$missing" ] && exit 0

echo "install-deps: installing:$missing"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -q
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends $missing
case " $missing " in
*" prometheus "*)
    if [ -d /run/systemd/system ]; then
        $SUDO systemctl disable --now prometheus.service >/dev/null 2>&1 || true
    fi
    ;;
esac
