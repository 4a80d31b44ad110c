# mk/verify.mk — shadow verification and profiling.
#
#   make bench-verify    /v1/embeddings throughput at verify_sample_rate 0,
#                        0.001 and 1 in one run (bench/verify/run.sh; about
#                        REPS x 3 x DURATION, 75 s by default); prints a table
#   make perf-check      perf record -g on the running service attributes
#                        attention time to the fused kernel's named functions
#                        (tests/perf/check.sh; about 20 s)
#   make tsan-verify     tests/unit/test_verify.c (checker thread, capture
#                        slot, trip callback) under ThreadSanitizer, through
#                        the same Criterion stand-in as make tsan
bench-verify: $(BIN) model
	bench/verify/run.sh $(BIN) $(MODEL_DIR)

perf-check: $(BIN) model
	tests/perf/check.sh $(BIN) $(MODEL_DIR)

# As make tsan does it: a sub-make builds in build-tsan/ with SANITIZE=thread,
# and this test file is compiled against tests/tsan's criterion.h.
ifeq ($(BUILD),$(TSAN_BUILD))
VERIFY_TSAN_OBJ := $(BUILD)/obj/tests/tsan/runner.o $(BUILD)/obj/tests/unit/attn_ref.o \
                   $(BUILD)/obj/tests/unit/test_verify.o
$(BUILD)/obj/tests/unit/test_verify.o: private CFLAGS := -Itests/tsan $(CFLAGS)

$(BUILD)/tsan-verify-tests: $(VERIFY_TSAN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
endif

tsan-verify:
	@$(MAKE) --no-print-directory SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_BUILD)/tsan-verify-tests
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(TSAN_BUILD)/tsan-verify-tests

.PHONY: bench-verify perf-check tsan-verify
