# mk/selftest.mk — the start-up self-test under ThreadSanitizer.
#
#   make tsan-selftest   tests/unit/test_selftest.c under TSan in build-tsan/,
#                        with the Criterion stand-in (as `make tsan`): the
#                        self-test splits its reference check over the pool
#                        and merges per-chunk results after parallel_for.
#
# The objects and the library are the ones `make tsan` builds in the same
# folder, so CI builds them once for both.
ifeq ($(BUILD),$(TSAN_BUILD))
SELFTEST_TSAN_OBJ := $(BUILD)/obj/tests/tsan/runner.o $(BUILD)/obj/tests/unit/test_selftest.o
$(SELFTEST_TSAN_OBJ): private CFLAGS := -Itests/tsan $(CFLAGS)

$(BUILD)/tsan-selftest: $(SELFTEST_TSAN_OBJ) $(LIB)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
endif

# The broken-backend tests run serially (no threads for TSan to watch).
SELFTEST_TSAN_ARGS ?= --exclude='selftest/a_*' --exclude='selftest/an_*' \
                      --exclude='selftest/one_*' --exclude='selftest/kept_*'

.PHONY: tsan-selftest
tsan-selftest:
	@$(MAKE) --no-print-directory SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_BUILD)/tsan-selftest
	TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 $(TSAN_BUILD)/tsan-selftest \
	    $(SELFTEST_TSAN_ARGS)
