# mk/faulty.mk — test-only binaries.
#
#   $(BUILD)/attnserve-faulty   the service with tests/faulty/faulty_backend.c
#                               linked in (backend "faulty"), and gemm_run
#                               wrapped by tests/faulty/faulty_gemm.c (wrong
#                               under ATTNSERVE_FAULTY_GEMM), for the
#                               safety-net e2e tests; never installed or shipped.
#
# The object is linked by name, not from the archive, so its constructor
# always runs and registers the backend.
FAULTY_BIN := $(BUILD)/attnserve-faulty

$(FAULTY_BIN): $(BUILD)/obj/server/main.o $(BUILD)/obj/tests/faulty/faulty_backend.o \
              $(BUILD)/obj/tests/faulty/faulty_gemm.o $(LIB)
	$(CC) $(LDFLAGS) -Wl,--wrap=gemm_run -o $@ $^ $(LDLIBS)

# The e2e tests find it beside the binary they are given.
e2e-build: $(FAULTY_BIN)
