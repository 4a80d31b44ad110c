# mk/budget.mk — targets for the request-memory budget (server/work/membudget.c).
#
# Adds tests/unit/test_membudget.c to `make tsan`'s binary: its threads test
# races eight threads on the budget's lock-free counter at its limit, and the
# allocator's scopes are thread-local, both worth ThreadSanitizer's eye. The
# file uses only what tests/tsan's Criterion stand-in provides.
ifeq ($(BUILD),$(TSAN_BUILD))
MEMBUDGET_TSAN_OBJ := $(BUILD)/obj/tests/unit/test_membudget.o
$(MEMBUDGET_TSAN_OBJ): private CFLAGS := -Itests/tsan $(CFLAGS)
# Appended prerequisites link after the library, so it is named once more.
$(BUILD)/tsan-tests: $(MEMBUDGET_TSAN_OBJ)
$(BUILD)/tsan-tests: private LDLIBS := $(LIB) $(LDLIBS)
endif
