# mk/gpu_bundle.mk — the GPU checks built here, to run on a GPU machine that
# builds nothing (offline, without the project's Debian packages):
#
#   make gpu-bundle   $(BUILD)/gpu-bundle.tar.xz (tests/gpu/make-bundle.sh):
#       the service, the unit tests, gpu-attn, gpu-engine and the cuda
#       plugin with debug info stripped, the shared libraries they need
#       beyond glibc, the GCC runtime and CUDA, and the default model with
#       its weights stored as fp16; its size is printed, and more than
#       GPU_BUNDLE_MAX_MB fails. There: tests/gpu/run.sh BUNDLE.
GPU_BUNDLE := $(BUILD)/gpu-bundle.tar.xz
GPU_BUNDLE_MAX_MB ?= 55

.PHONY: gpu-bundle
gpu-bundle: $(GPU_BUNDLE)

$(GPU_BUNDLE): $(BIN) $(UNIT) $(CUDA_PLUGIN) $(GPU_ATTN) $(GPU_ENGINE) $(MODEL_DIR)/model.safetensors \
               tests/gpu/make-bundle.sh scripts/model_to_fp16.py
	MAX_MB=$(GPU_BUNDLE_MAX_MB) CUDA_HOME=$(CUDA_HOME) tests/gpu/make-bundle.sh $@ $(BUILD) $(MODEL_DIR)

$(MODEL_DIR)/model.safetensors:
	@scripts/get-model.sh $(MODEL_DIR)
