# mk/asan.mk — CI's AddressSanitizer + UBSan pass:
#
#   make asan    the unit tests and the end-to-end tests that reach C code,
#                with the objects in build-san-address-undefined/; every
#                server the e2e tests start must exit 0 with no report
#
# `make SANITIZE=address,undefined test` still runs every e2e file. The files
# left out here reach no C code that the files kept do not reach too, so
# under the sanitizers they add minutes and no coverage:
#   test_bench_tools.py  the benchmark scripts' Python (no server at all);
#   test_clients.py      third-party client libraries and schemathesis over
#                        the same routes and decoders as test_compat.py,
#                        test_openai.py and test_embeddings.py (kept); the
#                        decoders' random bodies are libFuzzer's job, itself
#                        under ASan+UBSan (make fuzz);
#   test_docs_ui.py      the /docs page in headless Chromium: the service's side
#                        is the static answers and the embeddings route that
#                        test_openapi.py and test_openai.py (kept) reach; its
#                        time is the browser's (about half a minute of CPU).
# They still run in `make test`, on the normal build.
ASAN_E2E_SKIP := test_bench_tools.py test_clients.py test_docs_ui.py

# Start-up self-tests every backend at the model's longest sequence: for the
# 8,192-token ModernBERT of test_long_inputs.py that took 28 s of the usual
# 30 s readiness wait under ASan on a loaded two-core machine (16 s naive,
# 12 s fused); the wait is raised here as make tsan-http raises it.
ASAN_READY_TIMEOUT_S := 180

.PHONY: asan
asan:
	@ATTNSERVE_E2E_READY_TIMEOUT_S=$(ASAN_READY_TIMEOUT_S) \
	    $(MAKE) --no-print-directory SANITIZE=address,undefined test \
	    E2E_ARGS="$(addprefix --ignore=,$(ASAN_E2E_SKIP)) $(E2E_ARGS)"
