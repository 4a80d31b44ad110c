# mk/fuzz.mk — libFuzzer targets (tests/fuzz/, issue 6 §1).
#
#   make fuzz-build               build every target in build-fuzz/ (clang,
#                                 -fsanitize=fuzzer,address,undefined)
#   make fuzz-replay              every committed corpus input through every
#                                 target, no fuzzing: CI's regression check
#   make fuzz FUZZ_SECONDS=N      each target fuzzes N seconds (default 30),
#                                 new inputs to build-fuzz/new/<target>/, not
#                                 to the committed corpus
#   make fuzz-merge               fold build-fuzz/new/ into the corpus, minimised
#   make fuzz-seeds               regenerate the seeds and fold them in likewise
#
# Any crash, sanitizer report or failed check fails the make; the input is
# left in build-fuzz/crashes/ (tests/fuzz/README.md: how to keep it).
#
# A sub-make builds the library with the usual rules into build-fuzz/: clang,
# ASan+UBSan from SANITIZE, and -fsanitize=fuzzer-no-link so that libFuzzer
# sees coverage of the code under test; only the targets link libFuzzer
# itself. CFLAGS goes through the environment, so the Makefile's own flags
# (-Werror among them) are still added to it.

FUZZ_BUILD   := build-fuzz
FUZZ_CC      ?= clang
FUZZ_CFLAGS  ?= -O1 -g -fsanitize=fuzzer-no-link
FUZZ_TARGETS := attention embeddings embed tokenize tokenizer tokenizer_unigram tokenizer_bpe \
                tokenizer_normalizers tokenizer_split tokenizer_pair safetensors config
FUZZ_SECONDS ?= 30
# libFuzzer flags for every run. A slow input is a finding (ten seconds is
# far beyond any input here, even under ASan), and so is one allocation of
# over 64 MB: no input of a few KB should need one, and a small body that
# makes the service allocate that much is a way to exhaust its memory.
FUZZ_OPTS    ?= -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=64
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_CORPUS  := tests/fuzz/corpus

.PHONY: fuzz-build fuzz-replay fuzz fuzz-merge fuzz-seeds

ifeq ($(BUILD),$(FUZZ_BUILD))
$(FUZZ_BUILD)/fuzz_%: $(BUILD)/obj/tests/fuzz/%.o $(LIB)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LDLIBS)
endif

fuzz-build:
	@CFLAGS='$(FUZZ_CFLAGS)' $(MAKE) --no-print-directory CC=$(FUZZ_CC) SANITIZE=address,undefined \
	    BUILD=$(FUZZ_BUILD) $(FUZZ_BINS)

# Each target is handed every file of every corpus (a body in another
# endpoint's corpus is still a body), as file arguments: libFuzzer then
# runs each once and stops at the first failure.
fuzz-replay: fuzz-build model
	@set -e; mkdir -p $(FUZZ_BUILD)/crashes; files=$$(find $(FUZZ_CORPUS) -type f | sort); \
	for t in $(FUZZ_TARGETS); do \
	    echo "fuzz-replay: $$t ($$(echo "$$files" | wc -l) inputs)"; \
	    echo "$$files" | xargs $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_OPTS) \
	        -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t- >$(FUZZ_BUILD)/replay-$$t.log 2>&1 \
	        || { tail -n 40 $(FUZZ_BUILD)/replay-$$t.log; exit 1; }; \
	done

fuzz: fuzz-build model
	@set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_BUILD)/new/$$t $(FUZZ_BUILD)/crashes; \
	    dict=; [ -f tests/fuzz/$$t.dict ] && dict=-dict=tests/fuzz/$$t.dict; \
	    echo "fuzz: $$t for $(FUZZ_SECONDS) s"; \
	    $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_OPTS) $$dict -max_total_time=$(FUZZ_SECONDS) \
	        -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t- \
	        $(FUZZ_BUILD)/new/$$t $(FUZZ_CORPUS)/$$t >$(FUZZ_BUILD)/fuzz-$$t.log 2>&1 \
	        || { tail -n 60 $(FUZZ_BUILD)/fuzz-$$t.log; exit 1; }; \
	    grep -E '^stat::(number_of_executed_units|average_exec_per_sec)|^#[0-9]+.*DONE' \
	        $(FUZZ_BUILD)/fuzz-$$t.log | tr '\n' ' '; echo; \
	done

fuzz-merge: fuzz-build model
	@set -e; for t in $(FUZZ_TARGETS); do \
	    [ -d $(FUZZ_BUILD)/new/$$t ] || continue; \
	    mkdir -p $(FUZZ_CORPUS)/$$t; \
	    $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_OPTS) -merge=1 $(FUZZ_CORPUS)/$$t $(FUZZ_BUILD)/new/$$t \
	        >$(FUZZ_BUILD)/merge-$$t.log 2>&1 || { tail -n 40 $(FUZZ_BUILD)/merge-$$t.log; exit 1; }; \
	    echo "fuzz-merge: $$t: $$(ls $(FUZZ_CORPUS)/$$t | wc -l) inputs"; \
	done

# Regenerates the seeds (tests/fuzz/make_seeds.py: the e2e bodies, the
# tokenizer cases, the model's header, the shipped config) and folds those
# that add coverage into the corpus.
fuzz-seeds: fuzz-build model
	@rm -rf $(FUZZ_BUILD)/seeds
	@python3 tests/fuzz/make_seeds.py $(FUZZ_BUILD)/seeds $(MODEL_DIR)
	@set -e; for t in $(FUZZ_TARGETS); do \
	    mkdir -p $(FUZZ_CORPUS)/$$t; \
	    $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_OPTS) -merge=1 $(FUZZ_CORPUS)/$$t $(FUZZ_BUILD)/seeds/$$t \
	        >$(FUZZ_BUILD)/merge-$$t.log 2>&1 || { tail -n 40 $(FUZZ_BUILD)/merge-$$t.log; exit 1; }; \
	    echo "fuzz-seeds: $$t: $$(ls $(FUZZ_CORPUS)/$$t | wc -l) inputs"; \
	done
