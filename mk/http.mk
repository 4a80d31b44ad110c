# http.mk — the HTTP front end's threads under ThreadSanitizer. Adds:
#   make tsan-http   the server built with SANITIZE=thread in build-tsan/ (the
#                    library objects `make tsan` already built there, whose
#                    flags are the same: only main.o is new),
#                    and the bad clients of the catalogue that exercise the
#                    connection watch thread, the cancel of a parked request
#                    and its resume against it, the drain's linger, idle
#                    connections evicted at max_connections and the framing
#                    checks, and the codec workers (workpool.h) taking
#                    requests at once and clients gone during them; any
#                    report fails the run
#                    (tests/e2e/conftest.py checks every server's log).
# The disconnect-while-queued test itself is left out: its slow batches take
# minutes under TSan; test_clients_racing_their_answers races the same paths.
TSAN_HTTP_TESTS := (catalogue and (racing or slowloris or max_connections or pipelined \
                   or chunked or received_in_full)) or test_connections \
                   or ambiguous_framing_directly or many_workers_at_once \
                   or client_gone_during_tokenization

.PHONY: tsan-http
tsan-http:
	@$(MAKE) --no-print-directory SANITIZE=thread BUILD=$(TSAN_BUILD) $(TSAN_BUILD)/attnserve \
		$(TSAN_BUILD)/stall_until_reset.so
	@TSAN_OPTIONS=halt_on_error=0 ATTNSERVE_E2E_READY_TIMEOUT_S=300 \
		tests/e2e/run.sh $(TSAN_BUILD)/attnserve \
		-k "$(TSAN_HTTP_TESTS)"
