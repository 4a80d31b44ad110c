# Static checks, both in .ci/run:
#   make lint          cppcheck on every C source (warnings, portability,
#                      performance); its false positives are listed, with
#                      reasons, in tests/lint/cppcheck.supp
#   make format-check  clang-format --dry-run -Werror with the committed
#                      .clang-format on every C source and header
# model/unicode_tables.c, model/unicode_norm.c and model/tok_tables.c are generated
# (scripts/gen_unicode_tables.py, gen_unicode_norm.py, gen_tok_tables.py) and checked by
# neither: they are data, laid out by their generators.
GENERATED_SRC := model/unicode_tables.c model/tok_tables.c model/unicode_norm.c
LINT_SRC := $(filter-out $(GENERATED_SRC),$(LIB_SRC)) server/main.c $(GOLDEN_IO_SRC)
FORMAT_SRC := $(LINT_SRC) $(UNIT_SRC) $(BENCH_SRC) $(wildcard tests/fuzz/*.c tests/float/*.c) \
              $(wildcard engines/plugins/*.c tests/engines/*.c) \
              $(filter-out model/unicode_tables.h,$(wildcard */*.h server/*/*.h tests/*/*.h))

.PHONY: lint format-check
lint:
	cppcheck --quiet --std=c11 --enable=warning,portability,performance --inline-suppr \
	    --error-exitcode=1 --suppressions-list=tests/lint/cppcheck.supp \
	    -I. -D__CPPCHECK__ -D_GNU_SOURCE $(LINT_SRC)

format-check:
	clang-format --dry-run -Werror $(FORMAT_SRC)
