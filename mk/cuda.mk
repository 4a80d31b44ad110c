# mk/cuda.mk — the CUDA engine plugin, built only on request (`make cuda`).
#
#   $(BUILD)/gpu-engines/cuda.so  engines/cuda/: the encoder on one NVIDIA GPU.
#       The kernels (kernels.cu) are compiled by nvcc for sm_80 and sm_90;
#       the engine (cuda_engine.c, calling the CUDA runtime and cuBLASLt),
#       cuDNN's fused attention (cuda_cudnn.c: cuDNN is dlopened at run time,
#       so only its headers, which the toolkit here ships, are needed to
#       build), its host-side logic (cuda_plan.c) and the model files it
#       reads with (the encoder interface, config, safetensors) by the C
#       compiler, position-independent with hidden visibility like the
#       cpu-avx512 plugin. model/encoder.c's family table names the CPU
#       encoder's load and forward, so those come along (never called here)
#       with what they call (the tokenizer too: bert_config_frame), each
#       file with the core's per-file ISA flags,
#       and OpenBLAS is linked. It links libcudart and libcublasLt from
#       CUDA_HOME (rpath set), never the core: on a machine without the
#       driver (libcuda.so) the plugin still loads, cudaGetDeviceCount fails
#       and the engine scores 0 with "no CUDA device: <the runtime's reason>".
#
# Its own directory, apart from $(BUILD)/engines: the tests of the CPU
# plugins count what that directory holds. With plugin_dir unset the service
# looks in both, beside its binary (server/ops/engine.c), so build/attnserve
# offers the cuda engine, or says why not, once it is built.
#
# cuda_plan.c is also compiled into the unit tests (tests/unit/
# test_cuda_plan.c), which run everywhere. Where nvcc is present the unit
# tests also build the plugin and check that it loads and is refused (or,
# on a GPU machine, offered), and that its init refuses the models its
# kernels cannot compute before any CUDA call; where nvcc is absent those
# tests say so and skip.
CUDA_HOME ?= /usr/local/cuda
NVCC      ?= $(CUDA_HOME)/bin/nvcc
CUDA_ARCHS ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90
NVCC_FLAGS ?= -O3 -std=c++17 -lineinfo
CUDA_PLUGIN := $(BUILD)/gpu-engines/cuda.so
CUDA_C_SRC := engines/cuda/cuda_engine.c engines/cuda/cuda_plan.c engines/cuda/cuda_cudnn.c \
              model/encoder.c \
              model/bert.c model/bert_forward.c model/bert_config.c model/blocks.c model/position.c model/safetensors.c kernels/gelu.c \
              $(wildcard model/tok*.c model/unicode*.c) \
              kernels/gelu_avx2.c kernels/gelu_avx512.c kernels/attention.c kernels/simd.c \
              kernels/naive.c kernels/threadpool.c $(wildcard kernels/gemm*.c)
CUDA_C_OBJ := $(CUDA_C_SRC:%.c=$(BUILD)/obj-plugin/cuda/%.o)
CUDA_CU_OBJ := $(BUILD)/obj-plugin/cuda/engines/cuda/kernels.o

$(BUILD)/obj-plugin/cuda/%.o: %.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) $(if $(filter %_avx512.c,$<),$(AVX512_FLAGS)) $(if $(filter %_avx2.c,$<),$(AVX2_FLAGS)) $(if $(filter %_avx512bf16.c,$<),$(BF16_FLAGS)) $(if $(filter $(VNNI_SRC),$<),$(VNNI_FLAGS)) \
	    -I$(CUDA_HOME)/include -c $< -o $@

$(CUDA_CU_OBJ): engines/cuda/kernels.cu engines/cuda/cuda_kernels.h $(BUILD)/flags
	@mkdir -p $(@D)
	$(NVCC) $(NVCC_FLAGS) $(CUDA_ARCHS) -I. -Xcompiler -fPIC,-fvisibility=hidden -c $< -o $@

$(CUDA_PLUGIN): $(CUDA_C_OBJ) $(CUDA_CU_OBJ)
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ -L$(CUDA_HOME)/lib64 \
	    -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++ $(PKG_LIBS) $(BLAS_LIBS) -ldl -lm -pthread

.PHONY: cuda
cuda: $(CUDA_PLUGIN)

# The host-side logic is tested on every machine.
$(UNIT): $(BUILD)/obj/engines/cuda/cuda_plan.o
# The refusal (or, with a GPU, the offer) is tested wherever nvcc is.
ifneq ($(wildcard $(NVCC)),)
$(UNIT): | $(CUDA_PLUGIN)
endif
$(BUILD)/obj/tests/unit/test_cuda_plan.o: private CFLAGS += -DATTN_BUILD_DIR='"$(BUILD)"'

# The GPU checks tests/gpu/run.sh runs (they build anywhere, run on a GPU):
#   gpu-attn    the attention kernels (ours and cuDNN's, loaded at run time)
#               against a double reference, and their benchmark: kernels.o,
#               cuda_plan.c and cuda_cudnn.c with libcudart;
#   gpu-engine  the engine through the contract, loaded from $(BUILD)/gpu-engines
#               as the service loads it: the core library only, and the
#               golden embeddings' loader (tests/unit/golden_embeddings.c,
#               the unit tests' own) with the goldens' reader and zlib.
GPU_ATTN := $(BUILD)/gpu-attn
GPU_ENGINE := $(BUILD)/gpu-engine
$(BUILD)/obj-plugin/cuda/tests/gpu/%.o: tests/gpu/%.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -I$(CUDA_HOME)/include -c $< -o $@
$(GPU_ATTN): $(BUILD)/obj-plugin/cuda/tests/gpu/gpu_attn.o $(BUILD)/obj-plugin/cuda/engines/cuda/cuda_plan.o \
             $(BUILD)/obj-plugin/cuda/engines/cuda/cuda_cudnn.o $(CUDA_CU_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lstdc++ -ldl -lm -pthread
$(GPU_ENGINE): $(BUILD)/obj-plugin/cuda/tests/gpu/gpu_engine.o $(BUILD)/obj/tests/unit/golden_embeddings.o \
               $(GOLDEN_IO_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(ZLIB_LIBS) $(LDLIBS)
.PHONY: gpu-checks
gpu-checks: $(CUDA_PLUGIN) $(GPU_ATTN) $(GPU_ENGINE)

# The static checks of the CUDA engine's C files and the GPU checks join
# `make lint` and `make format-check` (kernels.cu is C++ and left to nvcc).
CUDA_LINT_SRC := engines/cuda/cuda_engine.c engines/cuda/cuda_plan.c engines/cuda/cuda_cudnn.c \
                 tests/gpu/gpu_attn.c tests/gpu/gpu_engine.c
.PHONY: cuda-lint cuda-format-check
lint: cuda-lint
format-check: cuda-format-check
cuda-lint:
	cppcheck --quiet --std=c11 --enable=warning,portability,performance --inline-suppr \
	    --error-exitcode=1 --suppressions-list=tests/lint/cppcheck.supp \
	    -I. -D__CPPCHECK__ -D_GNU_SOURCE $(CUDA_LINT_SRC)
cuda-format-check:
	clang-format --dry-run -Werror $(CUDA_LINT_SRC) $(wildcard engines/cuda/*.h)
ifneq ($(wildcard $(NVCC)),)
e2e-build: $(CUDA_PLUGIN)
endif
