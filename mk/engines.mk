# mk/engines.mk — engine plugins, loaded at run time from `plugin_dir`.
#
#   $(BUILD)/engines/cpu-avx512.so  the cpu engine (engines/cpu.c) with the
#       model compiled for AVX-512: a real engine shipped as a plugin. Its
#       own copy of the model code is built position-independent with hidden
#       visibility, so only the descriptor is exported and nothing in it
#       interposes the core's symbols. The descriptor and score
#       (engines/plugins/cpu_avx512.c) are compiled without AVX-512.
#   $(BUILD)/test-engines/*.so  small broken plugins (tests/engines/) for the
#       registry's refusal cases: no descriptor symbol, another API version,
#       a score of 0; and `instant`, which answers a hash of the token ids at
#       once, for measuring the front end (make bench-frontend). Built for the
#       tests and benchmarks only, never installed.
#
# The core binary needs none of them. With plugin_dir unset the service
# loads those of $(BUILD)/engines (beside $(BUILD)/attnserve), never
# $(BUILD)/test-engines; with plugin_dir none, none.
ENGINE_PLUGINS := $(BUILD)/engines/cpu-avx512.so
ENGINE_TEST_PLUGINS := $(patsubst tests/engines/%.c,$(BUILD)/test-engines/%.so,$(wildcard tests/engines/*.c))

PLUGIN_CFLAGS := $(CFLAGS) -fPIC -fvisibility=hidden
# The model and what it calls: the GEMM layer (kernels/gemm*.c, whichever
# precisions this tree has), GELU, safetensors, the attention problem
# helpers and CPUID. Attention backends are not in it (the core hands the
# engine the backend in force), but for the naive one and the serial pool
# that int8's calibration forward runs at load, and the tokenizer
# (model/tok*.c, model/unicode*.c), whose specials frame that forward's
# sequences (bert_config_frame).
CPU_AVX512_SRC := engines/cpu.c model/encoder.c model/bert.c model/bert_forward.c model/bert_config.c model/blocks.c model/position.c model/safetensors.c \
                  $(wildcard model/tok*.c model/unicode*.c) \
                  kernels/gelu.c \
                  kernels/gelu_avx2.c kernels/gelu_avx512.c kernels/attention.c kernels/simd.c \
                  kernels/naive.c kernels/threadpool.c \
                  $(wildcard kernels/gemm*.c)
CPU_AVX512_OBJ := $(CPU_AVX512_SRC:%.c=$(BUILD)/obj-plugin/cpu-avx512/%.o)

$(BUILD)/obj-plugin/cpu-avx512/%.o: %.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) $(AVX512_FLAGS) $(if $(filter %_avx512bf16.c,$<),$(BF16_FLAGS)) $(if $(filter $(VNNI_SRC),$<),$(VNNI_FLAGS)) \
	    -DCPU_ENGINE_PLUGIN -c $< -o $@

# The score runs on CPUs without AVX-512: no AVX-512 flags here.
$(BUILD)/obj-plugin/cpu-avx512/engines/plugins/cpu_avx512.o: engines/plugins/cpu_avx512.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) -c $< -o $@

$(BUILD)/engines/cpu-avx512.so: $(CPU_AVX512_OBJ) $(BUILD)/obj-plugin/cpu-avx512/engines/plugins/cpu_avx512.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $^ $(PKG_LIBS) $(BLAS_LIBS) -lm -pthread

$(BUILD)/test-engines/%.so: tests/engines/%.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) $(LDFLAGS) -shared -o $@ $<

# instant reads the model directory's description (encoder_describe), and
# model/encoder.c's family table names the CPU encoder's load and forward:
# those come along, never called, each file with the core's per-file ISA
# flags (not cpu-avx512's AVX-512 everywhere), so it loads on any x86-64.
INSTANT_SRC := model/encoder.c model/bert.c model/bert_forward.c model/bert_config.c model/blocks.c model/position.c model/safetensors.c kernels/gelu.c \
               $(wildcard model/tok*.c model/unicode*.c) \
               kernels/gelu_avx2.c kernels/gelu_avx512.c kernels/attention.c kernels/simd.c \
               kernels/naive.c kernels/threadpool.c $(wildcard kernels/gemm*.c)
INSTANT_OBJ := $(INSTANT_SRC:%.c=$(BUILD)/obj-plugin/portable/%.o)

$(BUILD)/obj-plugin/portable/%.o: %.c $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) $(if $(filter %_avx512.c,$<),$(AVX512_FLAGS)) $(if $(filter %_avx2.c,$<),$(AVX2_FLAGS)) $(if $(filter %_avx512bf16.c,$<),$(BF16_FLAGS)) $(if $(filter $(VNNI_SRC),$<),$(VNNI_FLAGS)) \
	    -c $< -o $@

$(BUILD)/test-engines/instant.so: tests/engines/instant.c $(INSTANT_OBJ) $(BUILD)/flags
	@mkdir -p $(@D)
	$(CC) $(PLUGIN_CFLAGS) $(LDFLAGS) -shared -Wl,-z,defs -o $@ $< $(INSTANT_OBJ) \
	    $(PKG_LIBS) $(BLAS_LIBS) -lm -pthread

# The unit and e2e tests load both.
all: $(ENGINE_PLUGINS)
$(UNIT): | $(ENGINE_PLUGINS) $(ENGINE_TEST_PLUGINS)
e2e-build: $(ENGINE_PLUGINS) $(ENGINE_TEST_PLUGINS)

$(BUILD)/obj/tests/unit/test_engine.o: private CFLAGS += -DATTN_BUILD_DIR='"$(BUILD)"'
