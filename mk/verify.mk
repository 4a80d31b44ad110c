# mk/verify.mk — shadow verification and profiling (issue 7 §2, §3).
#
#   make bench-verify    /v1/embeddings throughput at verify_sample_rate 0,
#                        0.001 and 1 in one run (bench/verify/run.sh; about
#                        REPS x 3 x DURATION, 75 s by default); prints a table
#   make perf-check      perf record -g on the running service attributes
#                        attention time to the fused kernel's named functions
#                        (tests/perf/check.sh; about 20 s)
bench-verify: $(BIN) model
	bench/verify/run.sh $(BIN) $(MODEL_DIR)

perf-check: $(BIN) model
	tests/perf/check.sh $(BIN) $(MODEL_DIR)

.PHONY: bench-verify perf-check
