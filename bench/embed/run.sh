#!/bin/sh
# run.sh BIN [MODEL_DIR] — the embeddings benchmark (make bench-embed).
#
# Builds bench_embed next to BIN (its directory is the build directory), then,
# for each model in MODELS and each input length and batch size in turn, times
# attnserve in process (bench_embed, every precision) and right after it the
# peers (peers.py: ONNX Runtime fp32 and int8, OpenVINO fp32 and bf16,
# sentence-transformers/PyTorch) on the same generated inputs with the same
# thread count, so that every ratio comes from one run under the same load.
# Prints a section of side-by-side tables per model and writes
# bench/embed_throughput.png (MiniLM's). Last, MiniLM's inputs through the
# server's POST /v1/embeddings under concurrent load (http.sh; HTTP=0 skips
# it). Raw results stay in BUILD/bench-embed/ (MiniLM's) and its xlmr/,
# rerank/, modernbert/, modernbert-long/ and qwen3/ folders.
#
#   bench/embed/run.sh build/attnserve models/all-MiniLM-L6-v2
#   THREADS=2 LENGTHS="12 64" BATCHES=1,32 REPS=3 PEERS=0 bench/embed/run.sh build/attnserve
#   REPS=3 BUDGET=2 GEMM=0 HTTP=0 make bench-embed      (the short run bench/README.md records)
#   MODELS="xlmr rerank" XLMR_LENGTHS="12 64" XLMR_BATCHES=1,8 REPS=3 BUDGET=2 GEMM=0 make bench-embed
#   MODELS="modernbert qwen3" REPS=3 BUDGET=1 GEMM=0 HTTP=0 make bench-embed
#
# MODELS (default "minilm xlmr rerank") picks the sections:
#   minilm  MODEL_DIR (all-MiniLM-L6-v2) at LENGTHS (default "12 64 256")
#           x BATCHES (default 1,32,128);
#   xlmr    a 12-layer XLM-R-base-shaped embedder with random weights, at
#           XLMR_LENGTHS (default "12 64 256") x XLMR_BATCHES (default 1,32):
#           eight times MiniLM's work per token, so fewer cells (256 x 32 is
#           the slowest, about 1.4 TFLOP a forward);
#   rerank  a cross-encoder shaped as ms-marco-MiniLM-L-6-v2 with random
#           weights: one query of RERANK_QUERY tokens (default 12) with each
#           of RERANK_DOCS documents (default 32; a comma list times several)
#           of RERANK_LENGTHS tokens (default "64 256"), one call per query;
#           the table is pairs/s and the accuracy the largest |logit
#           difference| against CrossEncoder fp32;
#   modernbert  a ModernBERT-base-shaped embedder (22 layers, hidden 768,
#           local 128-token windows, mean pooling) with random weights, at
#           MODERNBERT_LENGTHS (default "12 128") x MODERNBERT_BATCHES
#           (default 1,8): about 0.22 GFLOP a token;
#   modernbert-long  the same model at MODERNBERT_LONG_LENGTHS (default
#           2048) x MODERNBERT_LONG_BATCHES (default 1), where the local
#           windows cover a sixteenth of each input;
#   qwen3   a Qwen3-Embedding-0.6B-shaped embedder (28 layers, hidden 1024,
#           8 K/V heads for 16 query heads, causal, last-token pooling) with
#           random weights, at QWEN3_LENGTHS (default "12 128") x
#           QWEN3_BATCHES (default 4): about 1.2 GFLOP a token, so 128 x 4
#           is some 0.6 TFLOP a forward.
# The family models need an attention backend that keeps a sliding window
# and groups query heads over fewer K/V heads (bench_embed stops at a
# backend that refuses a model's batches). They run on FAMILY_BACKENDS when
# it is set; else on BACKENDS when its first backend runs a one-input
# forward of the model, else on naive (which has both), said so.
# The random-weight models are made once by make_bench_models.py in the
# peers' venv and cached in BENCH_MODELS_DIR (default
# ~/.cache/attnserve/bench-embed/models); without the venv those sections
# are skipped, said so.
#
# PEER_ENGINES (default all of peers.py's: onnxruntime, onnxruntime-int8,
# openvino, openvino-bf16, pytorch; a comma list) picks the peers: on a CPU
# without AVX512_BF16 OpenVINO's bf16 hint runs an emulation at a few
# inputs/s that can take most of a run, and says nothing there.
#
# ROUNDS (default 1) repeats each cell that many times, attnserve then the
# peers in every round, and the report gives each cell the median of its
# rounds' throughputs and of their ratios, with the rounds' range beside: on
# a shared machine a slow spell of some seconds lands on one engine of one
# round, and a single round of a cell can read 2x off either way. An odd
# count gives each cell one of its rounds as the median.
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
MODELS=${MODELS:-"minilm xlmr rerank"}
LENGTHS=${LENGTHS:-"12 64 256"}
BATCHES=${BATCHES:-1,32,128}
XLMR_LENGTHS=${XLMR_LENGTHS:-"12 64 256"}
XLMR_BATCHES=${XLMR_BATCHES:-1,32}
RERANK_QUERY=${RERANK_QUERY:-12}
RERANK_DOCS=${RERANK_DOCS:-32}
RERANK_LENGTHS=${RERANK_LENGTHS:-"64 256"}
MODERNBERT_LENGTHS=${MODERNBERT_LENGTHS:-"12 128"}
MODERNBERT_BATCHES=${MODERNBERT_BATCHES:-1,8}
MODERNBERT_LONG_LENGTHS=${MODERNBERT_LONG_LENGTHS:-2048}
MODERNBERT_LONG_BATCHES=${MODERNBERT_LONG_BATCHES:-1}
QWEN3_LENGTHS=${QWEN3_LENGTHS:-"12 128"}
QWEN3_BATCHES=${QWEN3_BATCHES:-4}
FAMILY_BACKENDS=${FAMILY_BACKENDS:-}
BENCH_MODELS_DIR=${BENCH_MODELS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/attnserve/bench-embed/models}
BACKENDS=${BACKENDS:-fused}
PRECISIONS=${PRECISIONS:-fp32,bf16,int8}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-1}
case $ROUNDS in '' | *[!0-9]* | 0*) echo "bench-embed: ROUNDS must be a positive integer, not '$ROUNDS'" >&2; exit 2 ;; esac
BUDGET=${BUDGET:-8}
PEERS=${PEERS:-1}
PEER_ENGINES=${PEER_ENGINES:-}
GEMM_OPT=""
[ "${GEMM:-1}" = 1 ] || GEMM_OPT=--no-gemm
CHART=${CHART:-$ROOT/bench/embed_throughput.png}

unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
export OPENBLAS_NUM_THREADS=1

make -C "$ROOT" --no-print-directory BUILD="$BUILD" "$BUILD/bench_embed" >&2
BENCH=$BUILD/bench_embed
OUT=$BUILD/bench-embed
mkdir -p "$OUT"

has() { case " $MODELS " in *" $1 "*) return 0 ;; esac; return 1; }

# The venv serves the peers and makes the random-weight models.
VENV_PY=""
RANDOM_MODELS="xlmr rerank modernbert modernbert-long qwen3"
for m in $MODELS; do
    case " minilm $RANDOM_MODELS " in
    *" $m "*) ;;
    *) echo "bench-embed: MODELS: no section '$m' (the sections: minilm $RANDOM_MODELS)" >&2; exit 2 ;;
    esac
done
has_random() {
    for m in $RANDOM_MODELS; do has "$m" && return 0; done
    return 1
}
if [ "$PEERS" = 1 ] || has_random; then
    if python3 "$HERE/peers.py" --inputs /dev/null --setup-only; then
        VENV_PY=$(python3 -c 'import sys; sys.path.insert(0, sys.argv[1]); import peers; print(peers.default_venv())' "$HERE")/bin/python
    else
        echo "bench-embed: the peers (ONNX Runtime, PyTorch) could not be installed; attnserve only" >&2
    fi
fi
PY=""
[ "$PEERS" = 1 ] && PY=$VENV_PY

load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "bench-embed: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, $THREADS threads, load average at start $(load)" >&2

# bench_model TITLE DIR LENGTHS BATCHES OUT_DIR CHART [PAIRS_QUERY]: one
# model's section. With PAIRS_QUERY the model is a cross-encoder and every
# text is a document paired with one query of that many tokens. The
# attention backends are $section_backends.
section_backends=$BACKENDS
bench_model() {
    title=$1 dir=$2 lengths=$3 batches=$4 out=$5 chart=$6 pairs=${7:-}
    backends=$section_backends
    pair_opt="" rerank_opt=""
    if [ -n "$pairs" ]; then
        pair_opt="--pairs $pairs"
        rerank_opt=--rerank
    fi
    mkdir -p "$out"
    : >"$out/attnserve.jsonl"
    : >"$out/peers.jsonl"
    : >"$out/accuracy.jsonl"
    rm -f "$out"/inputs-*.jsonl
    start_load=$(load)
    max_batch=$(echo "$batches" | tr , '\n' | sort -n | tail -1)
    for len in $lengths; do
        "$BENCH" --model "$dir" $pair_opt --lengths "$len" --batches "$max_batch" \
            --dump-inputs "$out/inputs-$len.jsonl"
    done
    # Accuracy, once per run: every attnserve precision's outputs for every
    # input against fp32 sentence-transformers, beside the peers' own.
    if [ -n "$PY" ]; then
        echo "bench-embed: $title: accuracy of every engine against fp32 sentence-transformers (load $(load))" >&2
        for len in $lengths; do cat "$out/inputs-$len.jsonl"; done >"$out/inputs-all.jsonl"
        "$BENCH" --model "$dir" $pair_opt --threads "$THREADS" --backends "${backends%%,*}" \
            --precisions "$PRECISIONS" --lengths "$(echo $lengths | tr ' ' ,)" --batches "$max_batch" \
            --dump-embeddings "$out/embeddings.jsonl" >&2
        "$PY" "$HERE/peers.py" --inputs "$out/inputs-all.jsonl" --model "$dir" --threads "$THREADS" \
            $rerank_opt ${PEER_ENGINES:+--peers "$PEER_ENGINES"} --batches "" --accuracy --attnserve-embeddings "$out/embeddings.jsonl" \
            >"$out/accuracy.jsonl" 2>"$out/accuracy.log" ||
            { cat "$out/accuracy.log" >&2; echo "bench-embed: $title: the accuracy check failed; tables without it" >&2; }
    else
        echo "bench-embed: $title: no accuracy column: it needs the peers' fp32 sentence-transformers" >&2
    fi
    # Each (length, batch) cell runs attnserve and then the peers back to
    # back, so a change in the machine's load lands on both sides of a ratio;
    # each round of it does so again, its results after a round marker.
    for len in $lengths; do
        for batch in $(echo "$batches" | tr , ' '); do
            round=1
            while [ "$round" -le "$ROUNDS" ]; do
                echo "bench-embed: $title: $len-token inputs, batch $batch, round $round of $ROUNDS: attnserve ($backends)${PY:+, then peers} (load $(load))" >&2
                echo "{\"kind\": \"round\", \"round\": $round}" >>"$out/attnserve.jsonl"
                "$BENCH" --json --model "$dir" $pair_opt --threads "$THREADS" --backends "$backends" \
                    --precisions "$PRECISIONS" $GEMM_OPT \
                    --lengths "$len" --batches "$batch" --reps "$REPS" --budget "$BUDGET" >>"$out/attnserve.jsonl"
                round=$((round + 1))
                [ -n "$PY" ] || continue
                echo "{\"kind\": \"round\", \"round\": $((round - 1))}" >>"$out/peers.jsonl"
                "$PY" "$HERE/peers.py" --inputs "$out/inputs-$len.jsonl" --model "$dir" $rerank_opt \
                    ${PEER_ENGINES:+--peers "$PEER_ENGINES"} --threads "$THREADS" --batches "$batch" --reps "$REPS" --budget "$BUDGET" \
                    >>"$out/peers.jsonl" 2>"$out/peers.log" ||
                    { cat "$out/peers.log" >&2; echo "bench-embed: $title: the peers failed on $len x $batch; table without them" >&2; }
            done
        done
    done
    echo
    echo "## $title"
    echo
    "${PY:-python3}" "$HERE/report.py" ${chart:+--chart "$chart"} --backend "${backends%%,*}" \
        --note "load average (1, 5, 15 min) at start $start_load, at end $(load)" \
        "$out/attnserve.jsonl" "$out/peers.jsonl" "$out/accuracy.jsonl"
}

if has minilm; then
    bench_model "$(basename "$(realpath "$MODEL")") embeddings, in process" "$MODEL" \
        "$LENGTHS" "$BATCHES" "$OUT" "$CHART"
fi

# The random-weight models, made (once) in the venv.
if has_random; then
    if [ -z "$VENV_PY" ]; then
        echo "bench-embed: no venv to make the random-weight models ($RANDOM_MODELS); those sections skipped" >&2
        for m in $RANDOM_MODELS; do MODELS=$(echo " $MODELS " | sed "s/ $m / /"); done
    else
        want=""
        has xlmr && want="$want,xlmr-base-random"
        has rerank && want="$want,ce-minilm-random"
        { has modernbert || has modernbert-long; } && want="$want,modernbert-base-random"
        has qwen3 && want="$want,qwen3-0.6b-random"
        HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 "$VENV_PY" "$HERE/make_bench_models.py" \
            --out "$BENCH_MODELS_DIR" --minilm "$MODEL" --models "${want#,}" >/dev/null
    fi
fi
if has xlmr; then
    bench_model "XLM-R base shape (12 layers, hidden 768; random weights) embeddings, in process" \
        "$BENCH_MODELS_DIR/xlmr-base-random" "$XLMR_LENGTHS" "$XLMR_BATCHES" "$OUT/xlmr" ""
fi
if has rerank; then
    bench_model "Rerank: ms-marco-MiniLM-L-6-v2 shape (random weights), one $RERANK_QUERY-token query × $RERANK_DOCS documents, in process" \
        "$BENCH_MODELS_DIR/ce-minilm-random" "$RERANK_LENGTHS" "$RERANK_DOCS" "$OUT/rerank" "" \
        "$RERANK_QUERY"
fi

# family_backends DIR: the attention backends to run the family model DIR
# on (the header's rule).
family_backends() {
    if [ -n "$FAMILY_BACKENDS" ]; then
        echo "$FAMILY_BACKENDS"
    elif "$BENCH" --model "$1" --threads "$THREADS" --backends "${BACKENDS%%,*}" --lengths 16 \
        --batches 1 --reps 1 --budget 1 --no-gemm >/dev/null 2>"$OUT/probe.log"; then
        echo "$BACKENDS"
    else
        echo "bench-embed: $(basename "$1"): $(tail -1 "$OUT/probe.log"); running it on naive" >&2
        echo naive
    fi
}

if has modernbert || has modernbert-long; then
    section_backends=$(family_backends "$BENCH_MODELS_DIR/modernbert-base-random")
fi
if has modernbert; then
    bench_model \
        "ModernBERT-base shape (22 layers, hidden 768; random weights) embeddings, in process" \
        "$BENCH_MODELS_DIR/modernbert-base-random" "$MODERNBERT_LENGTHS" "$MODERNBERT_BATCHES" \
        "$OUT/modernbert" ""
fi
if has modernbert-long; then
    bench_model \
        "ModernBERT-base shape (random weights), long inputs, in process" \
        "$BENCH_MODELS_DIR/modernbert-base-random" "$MODERNBERT_LONG_LENGTHS" \
        "$MODERNBERT_LONG_BATCHES" "$OUT/modernbert-long" ""
fi
if has qwen3; then
    section_backends=$(family_backends "$BENCH_MODELS_DIR/qwen3-0.6b-random")
    bench_model \
        "Qwen3-Embedding-0.6B shape (28 layers, hidden 1024; random weights) embeddings, in process" \
        "$BENCH_MODELS_DIR/qwen3-0.6b-random" "$QWEN3_LENGTHS" "$QWEN3_BATCHES" "$OUT/qwen3" ""
fi

# Through the server: POST /v1/embeddings under concurrent load (HTTP=0 skips).
if has minilm && [ "${HTTP:-1}" = 1 ]; then
    echo
    echo "Through HTTP (POST /v1/embeddings, backend ${BACKEND:-fused}, wrk on the same cores, load $(load)):"
    echo
    "$HERE/http.sh" "$BIN" "$MODEL" "$OUT"
fi
