#!/usr/bin/env bash
# tests/container/run.sh — builds the attnserve image from the project's own
# Dockerfile with podman, runs it, waits for /ready, sends a real request,
# stops it with SIGTERM and checks that it drained and exited 0.
#
# No Docker engine runs on the project's machines and no registry can be
# reached, so this follows ../shared/notes/containers.md: podman + runc from
# Debian, a containers.conf with the cgroupfs manager and no default ulimits,
# and a debian:bookworm-slim base image made locally with debootstrap (only
# when podman's store does not already hold it, so repeated runs are quick).
# Elsewhere the same Dockerfile builds with plain `docker build`.
#
# Usage: tests/container/run.sh            (as root; installs what is missing)
# Environment:
#   ATTNSERVE_IMAGE           tag to build (default localhost/attnserve:test)
#   ATTNSERVE_CONTAINER_BAKE  1 (default): also build with --build-arg MODEL=bake
#                             and serve the baked-in model; 0: skip that
#   ATTNSERVE_MODEL_DIR       host model directory (default models/all-MiniLM-L6-v2)
#
# Every step is bounded by a timeout; any failure stops the script with a
# message and a non-zero status; the containers it started are always removed.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"

IMAGE=${ATTNSERVE_IMAGE:-localhost/attnserve:test}
BASE=docker.io/library/debian:bookworm-slim
BAKE=${ATTNSERVE_CONTAINER_BAKE:-1}
MODEL_DIR=${ATTNSERVE_MODEL_DIR:-models/all-MiniLM-L6-v2}
PY=/usr/bin/python3             # Debian's, with python3-requests
STOP_TIMEOUT=30                 # podman stop -t: SIGKILL after this many seconds
READY_TIMEOUT=120               # seconds to wait for /ready

log() { echo "container-test: $*" >&2; }
die() { echo "container-test: FAIL: $*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "must run as root (podman with runc and cgroupfs, apt-get)"

WORK=$(mktemp -d /tmp/attnserve-container.XXXXXX)
CONTAINERS=()
LOAD_PID=""
cleanup() {
    local rc=$?
    [ -n "$LOAD_PID" ] && kill "$LOAD_PID" 2>/dev/null || true
    for c in "${CONTAINERS[@]}"; do
        if [ "$rc" -ne 0 ]; then
            podman --runtime runc logs "$c" >"$WORK/$c.log" 2>&1 || true
            [ -s "$WORK/$c.log" ] && { log "--- last logs of $c ---"; tail -n 40 "$WORK/$c.log" >&2; }
        fi
        podman --runtime runc rm -f -t 0 "$c" >/dev/null 2>&1 || true
    done
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- 1. tools -------------------------------------------------------------
need=""
for p in podman runc debootstrap; do
    command -v "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
    log "installing:$need"
    timeout 600 apt-get update -q >/dev/null || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q $need >/dev/null ||
        die "apt-get install$need failed"
fi

# containers.conf: no default ulimits (RLIMIT_NOFILE fails here) and the
# cgroupfs manager (no systemd); runc instead of crun (crun fails on cgroups).
cat >"$WORK/containers.conf" <<'EOF'
[containers]
default_ulimits = []
[engine]
cgroup_manager = "cgroupfs"
EOF
export CONTAINERS_CONF="$WORK/containers.conf"
pm() { podman --runtime runc "$@"; }

# ---- 2. base image, made locally once ---------------------------------------
# The build reaches PyPI (the Swagger UI wheel) through this network's egress
# proxy, whose certificate authorities the host trusts from
# /usr/local/share/ca-certificates; a registry's image on such a network is
# the site's own, with them in it. So the stand-in carries them, and Debian's
# ca-certificates (installed by the build) adds them to the bundle that
# Debian's pip reads. An image in the store without them is made again.
LOCAL_CAS=$(cd /usr/local/share/ca-certificates 2>/dev/null && ls -- *.crt 2>/dev/null | sort | tr '\n' ' ')
if pm image exists "$BASE" && [ -n "$LOCAL_CAS" ] &&
    [ "$(pm run --rm --network none --entrypoint sh "$BASE" -c \
        'cd /usr/local/share/ca-certificates 2>/dev/null && ls -- *.crt 2>/dev/null | sort | tr "\n" " "')" != "$LOCAL_CAS" ]; then
    log "base image $BASE lacks the host's local certificate authorities: making it again"
    pm rmi -f "$BASE" >/dev/null
fi
if pm image exists "$BASE"; then
    log "base image $BASE already in podman's store"
else
    src=/etc/apt/sources.list.d/debian.sources
    MIRROR=$(awk '/^URIs:/ { print $2; exit }' "$src" 2>/dev/null || true)
    if [ -z "$MIRROR" ] && [ -f /etc/apt/sources.list ]; then
        MIRROR=$(awk '$1 == "deb" && $3 == "bookworm" { print $2; exit }' /etc/apt/sources.list)
    fi
    [ -n "$MIRROR" ] || die "no Debian mirror found in $src or /etc/apt/sources.list"
    log "making $BASE with debootstrap from $MIRROR"
    rootfs="$WORK/rootfs"
    timeout 900 debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
        { tail -n 20 "$WORK/debootstrap.log" >&2; die "debootstrap failed"; }
    # As the official -slim image: no apt lists or caches, no docs.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin \
        "$rootfs"/var/cache/apt/archives/*.deb
    if [ -n "$LOCAL_CAS" ]; then
        mkdir -p "$rootfs/usr/local/share/ca-certificates"
        cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
    fi
    tar -C "$rootfs" -c . | pm import --change 'CMD ["bash"]' - "$BASE" >"$WORK/import.log" 2>&1 ||
        { cat "$WORK/import.log" >&2; die "podman import of the base image failed"; }
    rm -rf "$rootfs"
fi

# ---- 3. the project's image -------------------------------------------------
# --format docker: the OCI format has no HEALTHCHECK, and we check it below.
build() {
    local tag=$1; shift
    log "podman build $* -t $tag"
    timeout 1200 podman --runtime runc build --pull=never --network host --format docker \
        "$@" -t "$tag" . >"$WORK/build.log" 2>&1 ||
        { tail -n 40 "$WORK/build.log" >&2; die "podman build of $tag failed"; }
}
t0=$(date +%s)
build "$IMAGE"
log "image $IMAGE built in $(($(date +%s) - t0)) s"

# The runtime image holds no compiler and runs as a non-root user.
user=$(pm image inspect --format '{{.Config.User}}' "$IMAGE")
[ -n "$user" ] && [ "$user" != root ] && [ "${user%%:*}" != 0 ] ||
    die "image runs as '$user', not as a non-root user"
if pm run --rm --network none --entrypoint sh "$IMAGE" \
    -c 'command -v cc || command -v gcc || command -v make' 2>/dev/null; then
    die "the runtime image contains a compiler or make"
fi
hc=$(pm image inspect --format '{{json .Config.Healthcheck}}' "$IMAGE")
echo "$hc" | grep -q health || die "image has no HEALTHCHECK on /health: $hc"
stopsig=$(pm image inspect --format '{{.Config.StopSignal}}' "$IMAGE")
[ "$stopsig" = SIGTERM ] || [ "$stopsig" = 15 ] || die "STOPSIGNAL is '$stopsig', not SIGTERM"

# ---- 4. run, serve, drain ----------------------------------------------------
free_port() {
    "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# check_ready URL: waits for 200 on /ready (bounded), failing if the
# container exits first.
wait_ready() {
    local name=$1 url=$2 deadline=$(($(date +%s) + READY_TIMEOUT))
    until curl -fsS -m 2 -o /dev/null "$url/ready" 2>/dev/null; do
        [ "$(pm inspect --format '{{.State.Running}}' "$name" 2>/dev/null)" = true ] ||
            { pm logs "$name" >"$WORK/$name.log" 2>&1 || true; die "$name exited before /ready"; }
        [ "$(date +%s)" -lt "$deadline" ] || die "$name: /ready not 200 within ${READY_TIMEOUT}s"
        sleep 0.5
    done
}

# A real request: POST /v1/embeddings when the server serves it, otherwise
# POST /v1/attention (checked against a reference computed here). Prints
# which one ran.
real_request() {
    timeout 60 "$PY" "$ROOT/tests/container/request.py" "$1"
}

# serve NAME [podman run args...]: starts the image on a free loopback port
# with host networking, checks /health, /ready, /info, a real request and
# the Docker HEALTHCHECK; then SIGTERM and the drain.
serve() {  # serve NAME IMAGE [podman run args...]
    local name=$1 image=$2; shift 2
    local port; port=$(free_port)
    local url="http://127.0.0.1:$port"
    CONTAINERS+=("$name")
    log "$name: starting on $url"
    # ATTNSERVE_HOST=127.0.0.1: with --network host the container shares the
    # host's interfaces, and tests listen on loopback only.
    # Without systemd, podman cannot add the periodic healthcheck timer and
    # says so on stderr; `podman healthcheck run` below runs the check itself.
    pm run -d --name "$name" --network host \
        -e ATTNSERVE_HOST=127.0.0.1 -e ATTNSERVE_PORT="$port" -e ATTNSERVE_DRAIN_TIMEOUT_S=10 \
        "$@" "$image" >/dev/null 2>"$WORK/run.err" ||
        { cat "$WORK/run.err" >&2; die "podman run $name failed"; }
    grep -v 'systemd connection' "$WORK/run.err" >&2 || true
    wait_ready "$name" "$url"
    log "$name: ready"
    curl -fsS -m 5 "$url/health" >/dev/null || die "$name: /health not 200"
    curl -fsS -m 5 "$url/info" >"$WORK/info.json" || die "$name: /info not 200"
    # The image's own HEALTHCHECK command, run inside the container.
    pm healthcheck run "$name" >/dev/null 2>&1 ||
        { pm inspect --format '{{json .State.Health}}' "$name" >&2 || true
          die "$name: the image's HEALTHCHECK failed"; }
    log "$name: HEALTHCHECK passed"
    real_request "$url" || die "$name: the real request failed"

    # Stop it while requests are in flight: clients keep sending until the
    # listener closes; every answer must be right (200 checked, or 503).
    timeout $((STOP_TIMEOUT + 60)) "$PY" "$ROOT/tests/container/request.py" --drain-load "$url" \
        $((STOP_TIMEOUT + 30)) &
    LOAD_PID=$!
    sleep 1.5
    log "$name: podman stop -t $STOP_TIMEOUT (SIGTERM) under load"
    local s0; s0=$(date +%s)
    timeout $((STOP_TIMEOUT + 30)) podman --runtime runc stop -t "$STOP_TIMEOUT" "$name" \
        >/dev/null 2>"$WORK/stop.err" || { cat "$WORK/stop.err" >&2; die "$name: podman stop failed"; }
    grep -v 'systemd connection' "$WORK/stop.err" >&2 || true
    wait "$LOAD_PID" || die "$name: requests in flight at SIGTERM were not all answered correctly"
    local took=$(($(date +%s) - s0))
    local code; code=$(pm inspect --format '{{.State.ExitCode}}' "$name")
    pm logs "$name" >"$WORK/$name.log" 2>&1 || true
    [ "$code" = 0 ] || die "$name: exit status $code after SIGTERM, not 0 (137 = killed, no drain)"
    [ "$took" -lt "$STOP_TIMEOUT" ] || die "$name: stop took ${took}s: SIGTERM did not end it, SIGKILL did"
    # attnserve logs "draining" on the signal and "drained" once every
    # accepted request is answered; a drain that runs out of time says so.
    grep -Ewq 'draining' "$WORK/$name.log" || die "$name: the logs show no 'draining' line"
    grep -Ewq 'drained' "$WORK/$name.log" || die "$name: the logs show no 'drained' line"
    ! grep -q 'drain timed out' "$WORK/$name.log" || die "$name: the drain timed out"
    log "$name: drained on SIGTERM and exited 0 in ${took}s; its last log lines:"
    grep -Ew 'draining|drained|stopped' "$WORK/$name.log" | grep -v ' request ' | tail -n 3 |
        sed 's/^/    /' >&2
    pm rm -f "$name" >/dev/null 2>&1 || true
}

# Default image: the model is mounted read-only at the documented path.
mount_args=()
if [ -f "$MODEL_DIR/model.safetensors" ]; then
    mount_args=(-v "$(cd "$MODEL_DIR" && pwd):/models/all-MiniLM-L6-v2:ro")
else
    log "WARNING: $MODEL_DIR has no model.safetensors (run make model); serving without it"
fi
serve "attnserve-ct-$$-mount" "$IMAGE" "${mount_args[@]}"

# --build-arg MODEL=bake: the model is inside the image; nothing mounted.
if [ "$BAKE" = 1 ]; then
    [ -f "$MODEL_DIR/model.safetensors" ] || die "MODEL=bake needs $MODEL_DIR (run make model)"
    t0=$(date +%s)
    build "$IMAGE-model" --build-arg MODEL=bake
    log "image $IMAGE-model (model baked in) built in $(($(date +%s) - t0)) s"
    serve "attnserve-ct-$$-baked" "$IMAGE-model"
fi

# Keep the build stage tagged (its -dev packages layer is the slow part, and
# cached it makes the next run quick), then drop the untagged images that
# earlier builds left behind.
timeout 600 podman --runtime runc build --pull=never --network host --format docker \
    --target build -t localhost/attnserve-build:cache . >"$WORK/build.log" 2>&1 ||
    { tail -n 20 "$WORK/build.log" >&2; die "tagging the build stage failed"; }
pm image prune -f >/dev/null 2>&1 || true

log "PASS"
echo "1 passed, 0 failed"
