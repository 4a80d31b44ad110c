#!/bin/sh
# run.sh BIN [MODEL_DIR] — the embeddings benchmark (make bench-embed).
#
# Builds bench_embed next to BIN (its directory is the build directory), then,
# for each input length and batch size in turn, times attnserve in process
# (bench_embed, every precision) and right after it the peers (peers.py: ONNX
# Runtime fp32 and int8, OpenVINO fp32 and bf16, sentence-transformers/PyTorch)
# on the same generated inputs with the same
# thread count, so that every ratio comes from one run under the same load. Prints the side-by-side table and writes
# bench/embed_throughput.png. Last, the same inputs through the server's
# POST /v1/embeddings under concurrent load (http.sh; HTTP=0 skips it).
# Raw results stay in BUILD/bench-embed/.
#
#   bench/embed/run.sh build/attnserve models/all-MiniLM-L6-v2
#   THREADS=2 LENGTHS="12 64" BATCHES=1,32 REPS=3 PEERS=0 bench/embed/run.sh build/attnserve
#   REPS=3 BUDGET=2 GEMM=0 HTTP=0 make bench-embed      (the short run bench/README.md records)
#
# PRECISIONS (default fp32,bf16,int8; one this CPU lacks is skipped, said so)
# are timed in the same process, alternating case by case. GEMM=0 skips the
# standalone GEMM timing of each case.
#
# OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are unset here, for the benchmark
# only: these machines set them and they hold OpenBLAS to slower AVX2 kernels.
# OPENBLAS_NUM_THREADS=1 because the model splits each GEMM over the
# service's own pool.
set -eu
BIN=${1:?usage: $0 BIN [MODEL_DIR]}
MODEL=${2:-models/all-MiniLM-L6-v2}
HERE=$(dirname "$(realpath "$0")")
ROOT=$(realpath "$HERE/../..")
BUILD=$(realpath "$(dirname "$BIN")")
THREADS=${THREADS:-$(nproc)}
LENGTHS=${LENGTHS:-"12 64 256"}
BATCHES=${BATCHES:-1,32,128}
BACKENDS=${BACKENDS:-fused}
PRECISIONS=${PRECISIONS:-fp32,bf16,int8}
REPS=${REPS:-5}
BUDGET=${BUDGET:-8}
PEERS=${PEERS:-1}
GEMM_OPT=""
[ "${GEMM:-1}" = 1 ] || GEMM_OPT=--no-gemm
CHART=${CHART:-$ROOT/bench/embed_throughput.png}

unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OPENBLAS_NUM_THREADS=1

make -C "$ROOT" --no-print-directory BUILD="$BUILD" "$BUILD/bench_embed" >&2
BENCH=$BUILD/bench_embed
OUT=$BUILD/bench-embed
mkdir -p "$OUT"
: >"$OUT/attnserve.jsonl"
: >"$OUT/peers.jsonl"
: >"$OUT/accuracy.jsonl"
rm -f "$OUT"/inputs-*.jsonl

PY=""
if [ "$PEERS" = 1 ]; then
    if python3 "$HERE/peers.py" --inputs /dev/null --setup-only; then
        PY=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import peers; print(peers.default_venv())' "$HERE")/bin/python
    else
        echo "bench-embed: the peers (ONNX Runtime, PyTorch) could not be installed; attnserve only" >&2
    fi
fi

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "bench-embed: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $THREADS threads, load average at start $(load)" >&2
START_LOAD=$(load)
MAX_BATCH=$(echo "$BATCHES" | tr , '\n' | sort -n | tail -1)
for len in $LENGTHS; do
    "$BENCH" --model "$MODEL" --lengths "$len" --batches "$MAX_BATCH" --dump-inputs "$OUT/inputs-$len.jsonl"
done
# Accuracy, once per run: every attnserve precision's embeddings of every
# input against fp32 sentence-transformers, beside the peers' own.
if [ -n "$PY" ]; then
    echo "bench-embed: accuracy of every engine against fp32 sentence-transformers (load $(load))" >&2
    for len in $LENGTHS; do cat "$OUT/inputs-$len.jsonl"; done >"$OUT/inputs-all.jsonl"
    "$BENCH" --model "$MODEL" --threads "$THREADS" --backends "${BACKENDS%%,*}" \
        --precisions "$PRECISIONS" --lengths "$(echo $LENGTHS | tr ' ' ,)" --batches "$MAX_BATCH" \
        --dump-embeddings "$OUT/embeddings.jsonl" >&2
    "$PY" "$HERE/peers.py" --inputs "$OUT/inputs-all.jsonl" --model "$MODEL" --threads "$THREADS" \
        --batches "" --accuracy --attnserve-embeddings "$OUT/embeddings.jsonl" \
        >"$OUT/accuracy.jsonl" 2>"$OUT/accuracy.log" ||
        { cat "$OUT/accuracy.log" >&2; echo "bench-embed: the accuracy check failed; tables without it" >&2; }
else
    echo "bench-embed: no accuracy column: it needs the peers' fp32 sentence-transformers" >&2
fi
# Each (length, batch) cell runs attnserve and then the peers back to back,
# so a change in the machine's load lands on both sides of a ratio.
for len in $LENGTHS; do
    for batch in $(echo "$BATCHES" | tr , ' '); do
        echo "bench-embed: $len-token inputs, batch $batch: attnserve ($BACKENDS)${PY:+, then peers} (load $(load))" >&2
        "$BENCH" --json --model "$MODEL" --threads "$THREADS" --backends "$BACKENDS" \
            --precisions "$PRECISIONS" $GEMM_OPT \
            --lengths "$len" --batches "$batch" --reps "$REPS" --budget "$BUDGET" >>"$OUT/attnserve.jsonl"
        [ -n "$PY" ] || continue
        "$PY" "$HERE/peers.py" --inputs "$OUT/inputs-$len.jsonl" --model "$MODEL" \
            --threads "$THREADS" --batches "$batch" --reps "$REPS" --budget "$BUDGET" \
            >>"$OUT/peers.jsonl" 2>"$OUT/peers.log" ||
            { cat "$OUT/peers.log" >&2; echo "bench-embed: the peers failed on $len x $batch; table without them" >&2; }
    done
done
END_LOAD=$(load)

REPORT_PY=${PY:-python3}
"$REPORT_PY" "$HERE/report.py" --chart "$CHART" \
    --note "load average (1, 5, 15 min) at start $START_LOAD, at end $END_LOAD" \
    "$OUT/attnserve.jsonl" "$OUT/peers.jsonl" "$OUT/accuracy.jsonl"

# Through the server: POST /v1/embeddings under concurrent load (HTTP=0 skips).
if [ "${HTTP:-1}" = 1 ]; then
    echo
    echo "Through HTTP (POST /v1/embeddings, backend ${BACKEND:-fused}, wrk on the same cores, load $(load)):"
    echo
    "$HERE/http.sh" "$BIN" "$MODEL" "$OUT"
fi
