# mk/check.mk — the inner loop, a few minutes on two cores:
#
#   make check    format-check and lint, the C unit tests, then the end-to-end
#                 files this change touches (changed, added or untracked
#                 tests/e2e/test_*.py against CHECK_BASE), or none
#   make check E2E="test_errors.py test_compat.py"   those e2e files instead
#
# CHECK_BASE defaults to where the branch left its upstream (origin/main),
# else HEAD: on a clone with no upstream, uncommitted changes count. It is
# not CI: .ci/run runs everything, this runs what a change most likely
# broke.
CHECK_BASE ?= $(shell git merge-base HEAD origin/main 2>/dev/null || echo HEAD)
E2E ?= $(sort $(notdir $(shell { git diff --name-only $(CHECK_BASE) -- 'tests/e2e/test_*.py'; \
            git ls-files --others --exclude-standard 'tests/e2e/test_*.py'; } 2>/dev/null)))

.PHONY: check
check:
	@$(MAKE) --no-print-directory format-check lint
	@$(MAKE) --no-print-directory model
	@$(MAKE) --no-print-directory unit
	@$(MAKE) --no-print-directory $(BIN)
	@if [ -n "$(strip $(E2E))" ]; then \
	    echo "check: e2e $(E2E)"; tests/e2e/run.sh $(BIN) $(addprefix $(CURDIR)/tests/e2e/,$(E2E)); \
	else echo "check: no e2e file touched (E2E=\"test_x.py ...\" names some)"; fi
