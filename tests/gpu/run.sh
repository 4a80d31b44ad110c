#!/usr/bin/env bash
# tests/gpu/run.sh [BUNDLE] — the CUDA engine's checks, in one go, on a machine
# with an NVIDIA GPU (sm_80 or later): about 3 minutes on an H200 with 16
# cores, every step bounded by `timeout` and the whole run by BUDGET_S
# (default 330 s; a step that would start later is NOT RUN).
#
# What runs comes from one of two places:
#   tests/gpu/run.sh build/gpu-bundle.tar.xz   (or GPU_BUNDLE=...): made by
#       `make gpu-bundle` on a machine with the project's packages, for a GPU
#       machine without them (offline; tests/gpu/make-bundle.sh lists what the
#       archive holds). It is unpacked to a temporary directory and nothing is
#       built. The bundle's binaries, and only they (never python3), run with
#       LD_LIBRARY_PATH = its lib/, $CUDA_HOME/lib64 and, where the python3 on
#       PATH has them, the nvidia/cudnn/lib and nvidia/cublas/lib of its
#       site-packages (PyTorch's wheels bring cuDNN; such a machine may have
#       none of its own).
#   tests/gpu/run.sh   builds here (make cuda gpu-checks, the service and the
#       unit tests), on a machine with the packages (scripts/install-deps.sh).
#
# Steps, each writing RESULTS/<step>.log (RESULTS: default build/gpu-results;
# RESULTS=$OUT on the device tool brings them back):
#   libraries    (bundle) every binary resolves its libraries here
#   unit         the unit tests cuda_* (host logic; the plugin offered, score 100)
#   attention    gpu-attn: our flash, flash2 and fp32 kernels and cuDNN's
#                within their derived bounds, then TFLOP/s (8x512 and 1x4096
#                at d64/d128, MiniLM's 128x64 at d32)
#   engine       gpu-engine: golden cosines fp32/bf16 against the CPU engine;
#                the task models (tests/gpu/task_models.py: the tiny
#                classifiers, Dense and pooling models with heads of 32)
#                fp32/bf16 against the CPU engine; embeddings/s at 128 x 64
#                tokens
#   torch-embed  PyTorch's embeddings/s on that batch, eager and compiled
#   sdpa         PyTorch SDPA's flash, cuDNN and memory-efficient TFLOP/s on
#                gpu-attn's shapes
#   service      attnserve engine=cuda precision=bf16 with plugin_dir unset
#                (the plugin found beside the binary): its start-up self-test
#                and bf16 check, x-engine: cuda
#   http-float, http-base64  16 connections x 32 inputs for 10 s
#   cudnn, http-cudnn-float  the same with gpu_attention=cudnn (the service
#                above runs auto: the fastest kernel that passes its check),
#                where the service has that setting (otherwise: NOT RUN,
#                not built)
# A failed step never stops the others; one summary table comes last
# (tests/gpu/summary.py). Exit 0 when nothing FAILED and the GPU steps ran;
# 1 on a failure; 3 when no GPU is here (what needs one is NOT RUN, which is
# not a pass).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
cd "$REPO" || exit 1
BUNDLE=${1:-${GPU_BUNDLE:-}}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
BUDGET_S=${BUDGET_S:-330}
JOBS=${JOBS:-$(nproc)}
RESULTS=${RESULTS:-build/gpu-results}
mkdir -p "$RESULTS" && RESULTS=$(cd "$RESULTS" && pwd) || exit 1
rm -f "$RESULTS"/*.log "$RESULTS/steps.tsv" "$RESULTS/service-check.txt"
# PyTorch's peers load the model from a directory; the GPU machine reaches
# no hub, so transformers is told not to try.
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
FAILED=0
OURS=(env) # the command our binaries run under: with the bundle, its LD_LIBRARY_PATH

record() { # name status note
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "${4:-}" "$3" >>"$RESULTS/steps.tsv"
    echo "== $1: $2${3:+: $3}"
}
not_run() { record "$1" "NOT RUN" "$2"; }

# step NAME TIMEOUT_S COMMAND...: output to RESULTS/NAME.log; exit 3 is NOT
# RUN with the log's own reason.
step() {
    local name=$1 t=$2 left=$((BUDGET_S - SECONDS))
    shift 2
    if [ "$left" -lt 15 ]; then
        not_run "$name" "the run's budget (BUDGET_S=$BUDGET_S) is spent"
        return 3
    fi
    [ "$t" -le "$left" ] || t=$left
    local t0=$SECONDS rc
    echo "\$ $*" >"$RESULTS/$name.log"
    timeout -k 10 "$t" "$@" >>"$RESULTS/$name.log" 2>&1
    rc=$?
    local took=$((SECONDS - t0))
    case $rc in
    0) record "$name" ok "" "$took" ;;
    3) record "$name" "NOT RUN" "$(grep -m1 -o 'NOT RUN.*' "$RESULTS/$name.log" | sed 's/^NOT RUN:* *//' | cut -c1-160)" "$took" ;;
    124 | 137) record "$name" FAILED "timed out after ${t}s" "$took"; FAILED=1 ;;
    *) record "$name" FAILED "status $rc" "$took"; FAILED=1 ;;
    esac
    if [ $rc -ne 0 ] && [ $rc -ne 3 ]; then
        tail -15 "$RESULTS/$name.log" | sed 's/^/    /'
    fi
    return $rc
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# ---- what runs: the bundle's binaries, or a build here ------------------------
if [ -n "$BUNDLE" ]; then
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/attnserve-gpu.XXXXXX") || exit 1
    trap 'rm -rf "$WORK"' EXIT
    if ! tar -xJf "$BUNDLE" -C "$WORK"; then
        echo "FAILED: cannot unpack $BUNDLE"
        exit 1
    fi
    BUILD=$(sed -n 's/^build=//p' "$WORK/BUNDLE")
    MODEL=$(sed -n 's/^model=//p' "$WORK/BUNDLE")
    TASKS=$(sed -n 's/^tasks=//p' "$WORK/BUNDLE")
    # A bundle from before the task models: made here from the tree.
    if [ -z "$TASKS" ]; then
        TASKS=$WORK/models/task
        timeout 60 python3 "$REPO/tests/gpu/task_models.py" "$TASKS" >/dev/null || TASKS=
    fi
    echo "bundle: $(grep -E '^(commit|made)=' "$WORK/BUNDLE" | tr '\n' ' ')"
    # The tests' relative paths (golden files, the task models, the default
    # model's description) resolve from the unpacked root, beside BUILD.
    ln -s "$REPO/tests" "$WORK/tests"
    [ -e "$WORK/models/all-MiniLM-L6-v2" ] || ln -s "$(basename "$MODEL")" "$WORK/models/all-MiniLM-L6-v2"
    LIBS="$WORK/lib:$CUDA_HOME/lib64"
    for d in $(timeout 60 python3 -c 'import os, nvidia
print(" ".join(os.path.join(p, d, "lib") for p in nvidia.__path__ for d in ("cudnn", "cublas")))' 2>/dev/null); do
        [ -d "$d" ] && LIBS="$LIBS:$d"
    done
    echo "LD_LIBRARY_PATH for our binaries: $LIBS"
    OURS=(env "LD_LIBRARY_PATH=$LIBS")
    cd "$WORK" || exit 1
    step libraries 60 bash -c 'bad=0
        for f in "${@:2}"; do
            out=$(LD_LIBRARY_PATH=$1 ldd "$f") || bad=1
            printf "== %s\n%s\n" "$f" "$out"
            case $out in *"not found"*) bad=1 ;; esac
        done
        exit $bad' _ "$LIBS" "$BUILD/attnserve" "$BUILD/unit-tests" "$BUILD/gpu-attn" \
        "$BUILD/gpu-engine" "$BUILD/gpu-engines/cuda.so"
else
    BUILD=build
    MODEL=${MODEL:-models/all-MiniLM-L6-v2}
    BUDGET_S=$((BUDGET_S + 400)) step build 400 make -j"$JOBS" cuda gpu-checks build/attnserve build/unit-tests
    [ -f "$MODEL/model.safetensors" ] || timeout 120 make model >/dev/null 2>&1
    TASKS=build/gpu-task-models
    timeout 60 python3 tests/gpu/task_models.py "$TASKS" >/dev/null || TASKS=
    SECONDS=0 # the checks' budget starts once they are built
fi

GPU=1
if ! nvidia-smi -L >"$RESULTS/gpu.txt" 2>/dev/null; then
    GPU=0
    echo "no GPU (nvidia-smi -L failed: no NVIDIA GPU or driver here)" >"$RESULTS/gpu.txt"
fi
head -1 "$RESULTS/gpu.txt"

# ---- correctness and the engine -------------------------------------------------
step unit 90 "${OURS[@]}" "$BUILD/unit-tests" --filter 'cuda_*/*' --verbose
step attention 120 "${OURS[@]}" "$BUILD/gpu-attn"
# gpu-attn exits 3 when cuDNN cannot be loaded although our kernels ran:
# that is ours checked and timed, with the cudnn lines NOT RUN.
if [ $? = 3 ] && grep -q "^attention correctness: passed" "$RESULTS/attention.log"; then
    why=$(grep -m1 -o 'NOT RUN: cudnn.*' "$RESULTS/attention.log" | cut -c1-140)
    sed -i '$d' "$RESULTS/steps.tsv"
    record attention ok "ours passed; ${why:-cudnn NOT RUN}"
fi
if [ -f "$MODEL/model.safetensors" ]; then
    # Without TASKS (an older bundle) gpu-engine says the task models were
    # NOT RUN.
    step engine 150 "${OURS[@]}" "$BUILD/gpu-engine" "$BUILD/gpu-engines" "$MODEL" ${TASKS:+"$TASKS"}
    step torch-embed 150 python3 tests/gpu/torch_embed.py "$MODEL"
else
    not_run engine "$MODEL is absent (make model fetches it; the bundle carries an fp16 copy)"
    not_run torch-embed "$MODEL is absent"
fi
step sdpa 120 python3 tests/gpu/sdpa_bench.py

# ---- the service, as deployed: the plugin found beside the binary -------------
# serve NAME [FLAGS...]: starts attnserve with engine=cuda bf16 and probes it;
# leaves SERVER_PID and SERVER_URL set when it answers.
serve() {
    local name=$1 port
    shift
    port=$(free_port)
    SERVER_URL="http://127.0.0.1:$port"
    echo '{}' >"$RESULTS/empty.json"
    "${OURS[@]}" "$BUILD/attnserve" --config "$RESULTS/empty.json" --host=127.0.0.1 --port="$port" \
        --model="$MODEL" --engine=cuda --precision=bf16 --max_connections=256 "$@" \
        >"$RESULTS/$name-server.log" 2>&1 &
    SERVER_PID=$!
    step "$name" 130 python3 tests/gpu/http_load.py "$SERVER_URL" --probe --seconds 120 \
        --pid "$SERVER_PID"
    local rc=$?
    grep -h "precision passed\|engine offered engine=cuda\|engine refused\|GPU attention kernel" \
        "$RESULTS/$name-server.log" | head -4 >>"$RESULTS/$name.log"
    if [ $rc -ne 0 ] && ! kill -0 "$SERVER_PID" 2>/dev/null; then
        tail -15 "$RESULTS/$name-server.log" | sed 's/^/    /'
    fi
    return $rc
}
stop_server() {
    kill "$SERVER_PID" 2>/dev/null
    timeout 30 tail --pid="$SERVER_PID" -f /dev/null 2>/dev/null
    kill -9 "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
}
load() { # NAME FORMAT
    step "$1" 45 python3 tests/gpu/http_load.py "$SERVER_URL" --connections 16 --inputs 32 \
        --seconds 10 --format "$2"
}

if [ $GPU = 0 ]; then
    for s in service http-float http-base64; do not_run $s "no GPU here"; done
elif serve service; then
    grep -h "precision passed" "$RESULTS/service-server.log" | head -1 >"$RESULTS/service-check.txt"
    if ! grep -q "x-engine: cuda" "$RESULTS/service.log"; then
        record service-engine FAILED "the answer did not come from the cuda engine: $(grep x-engine "$RESULTS/service.log")"
        FAILED=1
    fi
    load http-float float
    load http-base64 base64
    stop_server
else
    stop_server
    for s in http-float http-base64; do not_run $s "the service did not start"; done
fi

# The cuDNN attention backend inside the engine, where the service has it.
if ! "${OURS[@]}" "$BUILD/attnserve" --help 2>/dev/null | grep -A3 -e '--gpu_attention' | grep -q cudnn; then
    echo "== cudnn: NOT RUN (not built): the service has no gpu_attention=cudnn setting"
elif [ $GPU = 0 ]; then
    not_run cudnn "no GPU here"
elif serve cudnn --gpu_attention=cudnn; then
    load http-cudnn-float float
    stop_server
else
    stop_server
fi

if ! python3 tests/gpu/summary.py "$RESULTS" >"$RESULTS/summary.txt" 2>&1; then
    echo "(the summary could not be made; the steps as recorded:)" >>"$RESULTS/summary.txt"
    cat "$RESULTS/steps.tsv" >>"$RESULTS/summary.txt"
fi
cat "$RESULTS/summary.txt"
if [ $FAILED = 1 ]; then
    exit 1
fi
[ $GPU = 1 ] || exit 3
exit 0
