# attnserve — build, test and benchmark.
#
#   make                       build build/attnserve (portable; SIMD chosen at run time)
#   make test                  install what is missing, build and run every test
#   make SANITIZE=address,undefined test   the same tests under ASan+UBSan
#   make tsan                  the scheduler and concurrency tests under TSan
#   make run                   install what is missing, fetch the model, serve it
#   make model                 fetch the default model into models/
#   make e2e                   end-to-end tests against the real binary
#   make cuda | gpu-bundle     the CUDA engine plugin; the GPU checks as one archive for a
#                              GPU machine that builds nothing (docs/cuda.md)
#   make test-deploy | test-cluster | test-container   deployment checks
#   make bench-attention | bench-http | bench-embed | bench-gemm | bench-latency | bench-frontend
#                              benchmarks (bench/README.md)
#   make deps                  install the Debian packages the project needs
#
# Objects go to $(BUILD) (default build/, or build-san-<list> with SANITIZE), so
# a sanitizer build never mixes with the normal one. Any change of flags
# rebuilds everything (see $(BUILD)/flags).

CC      ?= cc
comma   := ,
SANITIZE ?=
BUILD   ?= $(if $(SANITIZE),build-san-$(subst $(comma),-,$(SANITIZE)),build)

PKGS    := libmicrohttpd jansson libuv libpcre2-8
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
BLAS_CFLAGS := $(shell pkg-config --cflags openblas 2>/dev/null)
# OpenBLAS from pkg-config (the pthread build). The model splits every GEMM
# over the service's own pool and calls cblas_sgemm from several workers at
# once with openblas_set_num_threads(1); Debian's serial OpenBLAS is not safe
# for that (its buffer allocation takes no lock: tests/unit/test_blas_threads.c
# shows corrupt results), the pthread build is, so a RUNPATH pins it even
# where the system's alternatives select the serial one (RUNPATH, not RPATH:
# LD_LIBRARY_PATH overrides it, as on a GPU machine running the bundle of
# mk/gpu_bundle.mk with its own copy of OpenBLAS). Set to one thread at
# model load, before any GEMM, it starts no threads of its own (checked: the
# service runs main, MHD, connection-watch, loop, compute and pool threads
# only).
BLAS_LIBDIR := $(shell pkg-config --variable=libdir openblas 2>/dev/null)
BLAS_LIBS   := $(shell pkg-config --libs openblas 2>/dev/null) $(if $(BLAS_LIBDIR),-Wl$(comma)--enable-new-dtags$(comma)-rpath$(comma)$(BLAS_LIBDIR))
TEST_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null)

# Frame pointers everywhere so perf attributes time to every kernel;
# -g keeps symbols (the default build is not stripped).
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -Wall -Wextra -Werror -D_GNU_SOURCE -pthread \
           -fno-omit-frame-pointer -MMD -MP -I. $(PKG_CFLAGS) $(BLAS_CFLAGS)
ifneq ($(filter x86_64 i%86,$(shell uname -m)),)
CFLAGS  += -mno-omit-leaf-frame-pointer
endif
LDLIBS  += $(PKG_LIBS) $(BLAS_LIBS) -ldl -lm -pthread
# The int8 GEMM kernels are optional: kernels/gemm.c dispatches to them only
# when they are in the tree, and otherwise says they are not built.
ifneq ($(wildcard kernels/gemm_int8.c),)
CFLAGS  += -DATTN_HAVE_GEMM_INT8
endif
ifneq ($(SANITIZE),)
CFLAGS  += -fsanitize=$(SANITIZE) -fno-sanitize-recover=all
LDFLAGS += -fsanitize=$(SANITIZE)
endif

# Files named *_avx512.c / *_avx2.c hold one SIMD path each and are the only
# ones compiled with those instruction sets; callers reach them only after
# simd.c has checked CPUID.
# Elsewhere these files compile to nothing and the portable path runs.
ifneq ($(filter x86_64 i%86,$(shell uname -m)),)
AVX512_FLAGS := -mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx2 -mfma
AVX2_FLAGS   := -mavx2 -mfma
# The int8 kernels also need vpdpbusd; only these files get it, and the
# int8 path checks AVX512_VNNI before it reaches them.
VNNI_FLAGS   := -mavx512vnni
# The fp32 GEMM's tiles under ASan+UBSan: every load and every index of the
# accumulator array is checked and the accumulators leave their registers,
# which made a sanitized server about 3x slower at fp32 (300 inputs: 12-16 s
# against 4-6 s when OpenBLAS, never instrumented, ran them) and pushed the
# sanitized end-to-end tests past their deadlines. The kernel's bounds are
# checked against float64 on every tail shape by test_gemm; TSan still
# instruments it.
NO_ASAN_SRC := kernels/gemm_f32_avx512.c
# *_avx512bf16.c: AVX-512 plus the bf16 dot products (vdpbf16ps), reached
# only after attn_cpu_has(ATTN_CPU_AVX512_BF16).
BF16_FLAGS   := $(AVX512_FLAGS) -mavx512bf16
endif
VNNI_SRC := kernels/gemm_int8_avx512.c kernels/peak_int8_avx512.c

LIB_SRC   := $(sort $(wildcard kernels/*.c) $(filter-out server/main.c,$(wildcard server/*.c server/*/*.c)) $(wildcard model/*.c) \
                   $(wildcard engines/*.c))
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
UNIT_SRC  := $(sort $(wildcard tests/unit/*.c))
UNIT_OBJ  := $(UNIT_SRC:%.c=$(BUILD)/obj/%.o)
BENCH_SRC := $(sort $(wildcard bench/*.c))
BENCH_BIN := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
# The reader of tests/golden (golden_io.h) for the unit tests, the benchmarks
# that read goldens and the GPU checks. The large goldens are gzipped, so
# whatever links it also links zlib; the service itself links neither.
GOLDEN_IO_SRC := tests/golden/golden_io.c
GOLDEN_IO_OBJ := $(GOLDEN_IO_SRC:%.c=$(BUILD)/obj/%.o)
ZLIB_LIBS     := $(shell pkg-config --libs zlib 2>/dev/null)

LIB  := $(BUILD)/libattnserve.a
BIN  := $(BUILD)/attnserve
UNIT := $(BUILD)/unit-tests

.PHONY: all test unit tsan e2e e2e-build test-build run model bench-attention bench-http bench-embed bench-gemm \
        bench-latency bench-frontend deps clean format \
        test-deploy test-cluster test-container
all: $(BIN) $(BENCH_BIN)

# Rebuild everything when the compiler or flags change.
FLAGS_LINE := $(CC) $(CFLAGS) $(LDFLAGS) $(LDLIBS)
$(BUILD)/flags: FORCE
	@mkdir -p $(@D)
	@echo '$(FLAGS_LINE)' | cmp -s - $@ || echo '$(FLAGS_LINE)' > $@
FORCE:

$(BUILD)/obj/%.o: %.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) $(if $(filter %_avx512.c,$<),$(AVX512_FLAGS)) $(if $(filter %_avx2.c,$<),$(AVX2_FLAGS)) $(if $(filter %_avx512bf16.c,$<),$(BF16_FLAGS)) $(if $(filter $(VNNI_SRC),$<),$(VNNI_FLAGS)) $(if $(filter $(NO_ASAN_SRC),$<),-fno-sanitize=address$(comma)undefined) -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	$(AR) rcs $@ $^

$(BIN): $(BUILD)/obj/server/main.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(UNIT): $(UNIT_OBJ) $(GOLDEN_IO_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(TEST_LIBS) $(ZLIB_LIBS) $(LDLIBS)

$(BUILD)/%: $(BUILD)/obj/bench/%.o $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# The benchmarks that read goldens. private: the flags file their objects
# depend on must not see zlib, or every other target would rebuild.
GOLDEN_BENCH_BIN := $(BUILD)/bench_precision $(BUILD)/bench_tokenizer
$(GOLDEN_BENCH_BIN): $(GOLDEN_IO_OBJ)
$(GOLDEN_BENCH_BIN): private LDLIBS += $(ZLIB_LIBS)

# bench_gemm compares our bf16 GEMM with the libraries that have one: oneDNN
# and libxsmm (scripts/install-deps.sh installs both) are compiled in when
# present. Only this benchmark links them.
BENCH_GEMM_DEFS := $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),-DBENCH_HAVE_DNNL) \
                   $(if $(shell pkg-config --exists libxsmmnoblas 2>/dev/null && echo y),-DBENCH_HAVE_XSMM)
BENCH_GEMM_LIBS := $(if $(wildcard /usr/include/oneapi/dnnl/dnnl.h),-ldnnl -lgomp) \
                   $(shell pkg-config --libs libxsmmnoblas 2>/dev/null)
$(BUILD)/obj/bench/bench_gemm.o: CFLAGS += $(BENCH_GEMM_DEFS)
$(BUILD)/bench_gemm: LDLIBS := $(BENCH_GEMM_LIBS) $(LDLIBS)

deps:
	@scripts/install-deps.sh

# The default model (sentence-transformers/all-MiniLM-L6-v2) under models/.
MODEL_DIR ?= models/all-MiniLM-L6-v2
model:
	@scripts/get-model.sh $(MODEL_DIR)

# The whole suite: C unit tests (Criterion), then end-to-end tests against
# the real binary. Stages run in order, each in a fresh make so that the
# packages deps installs are seen by pkg-config; the first failure stops it.
test:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory model
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory e2e

# Criterion leaks a little of its own at exit; tests/lsan.supp names only it.
# tests/unit/run.sh repeats the failures after Criterion's summary.
unit: $(UNIT)
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	    tests/unit/run.sh $(UNIT) --jobs=2

# ThreadSanitizer: the scheduler and the tests that run threads (pool,
# attention on the pool, log lines from many threads, concurrent BLAS, the codec
# workers' pool, the tokenizer from four threads). Criterion cannot start under TSan
# (Snaipe/Criterion#274), so these files are compiled with -Itests/tsan, where
# criterion/criterion.h is a small stand-in, and linked with its runner
# (tests/tsan/runner.c) instead of libcriterion. A sub-make builds everything
# in build-tsan/ with SANITIZE=thread through the usual rules. Left out: the
# model tests and the long attention sweeps (many minutes under TSan, and no
# threads beyond the pool the kept attention tests already drive).
TSAN_BUILD := build-tsan
TSAN_SRC   := tests/tsan/runner.c tests/unit/attn_ref.c tests/unit/test_attention.c \
              tests/unit/test_blas_threads.c tests/unit/test_log.c tests/unit/test_scheduler.c \
              tests/unit/test_threadpool.c tests/unit/test_tokenizer.c tests/unit/test_workpool.c \
              $(GOLDEN_IO_SRC)
TSAN_ARGS  ?= --exclude='attention/random_head_dim_*' --exclude=attention/every_head_dim \
              --exclude='attention/long_sequence_*'
# Only in the sub-make: elsewhere the same object paths are Criterion's.
# private: the flags file these objects depend on must not see the -I.
ifeq ($(BUILD),$(TSAN_BUILD))
TSAN_OBJ   := $(TSAN_SRC:%.c=$(BUILD)/obj/%.o)
$(TSAN_OBJ): private CFLAGS := -Itests/tsan $(CFLAGS)

$(BUILD)/tsan-tests: $(TSAN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ZLIB_LIBS) $(LDLIBS)
endif

tsan:
	@$(MAKE) --no-print-directory model
	@$(MAKE) --no-print-directory SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_BUILD)/tsan-tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(TSAN_BUILD)/tsan-tests $(TSAN_ARGS)

# E2E_ARGS: extra pytest arguments (-k NAME, --ignore=FILE, ...). What the
# e2e tests run besides the binary (plugins, the faulty build, the short-send
# shim) is added to e2e-build by the mk/ file that builds it.
e2e: e2e-build
	@tests/e2e/run.sh $(BIN) $(E2E_ARGS)
e2e-build: $(BIN)

# Everything `make test` compiles, and nothing run: CI builds the sanitizer
# trees with it in the background while the normal tests run.
test-build: $(UNIT) e2e-build

# Deployment checks (each script installs the tools it needs): manifests
# validated, three instances behind haproxy under kill -9 and a rolling
# restart, and the image built and served by podman.
test-deploy: $(BIN)
	@tests/deploy/run.sh $(BIN)

test-cluster: $(BIN) model
	@tests/cluster/run.sh $(BIN)

test-container: model
	@tests/container/run.sh

# Installs what is missing, fetches the default model and serves it.
run:
	@scripts/install-deps.sh
	@$(MAKE) --no-print-directory model $(BIN)
	$(BIN) --config config/attnserve.json --model=$(MODEL_DIR) $(RUN_ARGS)

# Then fused against PyTorch's scaled_dot_product_attention, shape by shape
# (bench/attention/vs_torch.py; TORCH_ARGS e.g. "--shapes 8x512 --dims 64").
bench-attention: $(BUILD)/bench_attention
	$(BUILD)/bench_attention $(BENCH_ARGS)
	python3 bench/attention/vs_torch.py --bin $(BUILD)/bench_attention $(TORCH_ARGS)

# The bf16 GEMM against oneDNN, libxsmm and OpenBLAS (bench/README.md); the
# machine's OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE would force slow kernels.
bench-gemm: $(BUILD)/bench_gemm
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BUILD)/bench_gemm $(BENCH_ARGS)

bench-http: $(BIN)
	bench/http/run.sh $(BIN)

# Embeddings in process against sentence-transformers, ONNX Runtime and
# OpenVINO: all-MiniLM-L6-v2, a 12-layer XLM-R-shaped embedder and a
# cross-encoder's rerank (query x 32 documents), the last two with random
# weights made once in the bench venv; on request (MODELS) ModernBERT-base-
# and Qwen3-Embedding-0.6B-shaped embedders, also random. Knobs (MODELS,
# XLMR_LENGTHS, RERANK_DOCS, QWEN3_BATCHES, REPS, ...) are in
# bench/embed/run.sh's header, e.g.
# make bench-embed MODELS="xlmr rerank" REPS=3 BUDGET=2 GEMM=0, or
# make bench-embed MODELS="modernbert qwen3" REPS=3 BUDGET=1 GEMM=0 HTTP=0.
bench-embed: $(BIN) model
	bench/embed/run.sh $(BIN) $(MODEL_DIR)

# Small-request latency: bench_latency (one forward, stage by stage, and the
# pool and GEMM fixed costs) and bench/latency/run.sh (HTTP: one connection,
# the maximum, and open-loop load at half of it). BENCH_BINS: the servers to
# compare, interleaved (default: this build).
BENCH_BINS ?= $(BIN)
bench-latency: $(BIN) $(BUILD)/bench_latency model
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(BUILD)/bench_latency --model $(MODEL_DIR)
	MODEL=$(MODEL_DIR) bench/latency/run.sh $(BENCH_BINS)

# The HTTP front end without the engine's cost: /v1/embeddings answered by
# the instant test engine (and by the cpu engine beside it), embeddings/s and
# the service's CPU time per embedding from /proc (bench/frontend/run.sh).
# Knobs: ROUNDS (3), DURATION (3 s a cell; the cpu engine's CPU_DURATION 9 s),
# WORKERS, CONNS, e.g.
# make bench-frontend ROUNDS=5 DURATION=10 for a longer run.
bench-frontend: $(BIN) $(BUILD)/test-engines/instant.so model
	env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE bench/frontend/run.sh $(BIN) $(MODEL_DIR)

# What format-check checks (mk/lint.mk), so that the generated tables stay
# as their generators write them.
format:
	clang-format -i $(FORMAT_SRC)

clean:
	rm -rf build build-san-* $(TSAN_BUILD)

# Further targets live beside the checks they run, one file each in mk/
# (fuzzing, soak, valgrind, ...); they use the variables above.
include $(sort $(wildcard mk/*.mk))

# Plugin objects and the test plugins write their header dependencies too:
# without them an edited engines/engine.h left a stale plugin behind.
-include $(shell find $(BUILD)/obj $(BUILD)/obj-plugin $(BUILD)/test-engines -name '*.d' 2>/dev/null)
