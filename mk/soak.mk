# Soak and memcheck:
#   make soak [SOAK_SECONDS=N]   the bounded soak: steady valid and invalid load
#                                on loopback for N seconds (60..600, default 180);
#                                flat RSS, no fd growth, every status as expected
#   make valgrind                the server under valgrind memcheck for a short
#                                run, then every start-up failure path: no leak,
#                                no memory error, the expected exit status
.PHONY: soak valgrind

SOAK_SECONDS ?= 180

soak: $(BIN) model
	@tests/soak/run.sh $(BIN) $(SOAK_SECONDS)

# The normal build (-O2 -g): what ships is what memcheck checks; valgrind
# cannot run a sanitizer build at all.
valgrind: $(BIN) model
	@if [ -n "$(SANITIZE)" ]; then echo "make valgrind: not with SANITIZE" >&2; exit 2; fi
	@tests/valgrind/run.sh $(BIN)
