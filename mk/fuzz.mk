# mk/fuzz.mk — libFuzzer targets (tests/fuzz/).
#
#   make fuzz-build               build every target in build-fuzz/ (clang,
#                                 -fsanitize=fuzzer,address,undefined)
#   make fuzz-replay              every committed corpus input through every
#                                 target, no fuzzing: CI's regression check
#   make fuzz FUZZ_TOTAL_SECONDS=N  fuzz every target within N seconds of wall
#                                 time in all (default 120): FUZZ_JOBS targets
#                                 (default: the cores) run side by side, each
#                                 for N x FUZZ_JOBS / targets seconds (20 s
#                                 each at 120 s on two cores); FUZZ_SECONDS=S
#                                 instead gives each target S seconds. New
#                                 inputs go to build-fuzz/new/<target>/, not
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
                tokenizer_normalizers tokenizer_split tokenizer_families tokenizer_pair \
                safetensors config
# A total bound, not a per-target one, so that adding a target costs CI no
# time: each target's share shrinks instead (libFuzzer runs one thread, so
# the cores each take a target).
FUZZ_TOTAL_SECONDS ?= 120
FUZZ_JOBS    ?= $(shell nproc)
FUZZ_SECONDS ?= $(shell echo $$(( $(FUZZ_TOTAL_SECONDS) * $(FUZZ_JOBS) / $(words $(FUZZ_TARGETS)) )))
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
	@mkdir -p $(FUZZ_BUILD)/crashes
	@find $(FUZZ_CORPUS) -type f | sort >$(FUZZ_BUILD)/replay-inputs
	@echo "fuzz-replay: $$(wc -l <$(FUZZ_BUILD)/replay-inputs) inputs through each of" \
	    "$(words $(FUZZ_TARGETS)) targets, $(FUZZ_JOBS) at a time"
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(FUZZ_JOBS) -I{} sh -c '\
	    xargs $(FUZZ_BUILD)/fuzz_{} $(FUZZ_OPTS) -artifact_prefix=$(FUZZ_BUILD)/crashes/{}- \
	        <$(FUZZ_BUILD)/replay-inputs >$(FUZZ_BUILD)/replay-{}.log 2>&1 \
	        || { echo "fuzz-replay: {} FAILED"; tail -n 40 $(FUZZ_BUILD)/replay-{}.log; exit 255; }'

fuzz: fuzz-build model
	@mkdir -p $(FUZZ_BUILD)/crashes
	@echo "fuzz: $(words $(FUZZ_TARGETS)) targets, $(FUZZ_SECONDS) s each, $(FUZZ_JOBS) at a time"
	@printf '%s\n' $(FUZZ_TARGETS) | xargs -P $(FUZZ_JOBS) -I{} sh -c '\
	    t={}; mkdir -p $(FUZZ_BUILD)/new/$$t; \
	    dict=; [ -f tests/fuzz/$$t.dict ] && dict=-dict=tests/fuzz/$$t.dict; \
	    $(FUZZ_BUILD)/fuzz_$$t $(FUZZ_OPTS) $$dict -max_total_time=$(FUZZ_SECONDS) \
	        -print_final_stats=1 -artifact_prefix=$(FUZZ_BUILD)/crashes/$$t- \
	        $(FUZZ_BUILD)/new/$$t $(FUZZ_CORPUS)/$$t >$(FUZZ_BUILD)/fuzz-$$t.log 2>&1 \
	        || { echo "fuzz: $$t FAILED"; tail -n 60 $(FUZZ_BUILD)/fuzz-$$t.log; exit 255; }; \
	    echo "fuzz: $$t $$(grep -E "^stat::(number_of_executed_units|average_exec_per_sec)" \
	        $(FUZZ_BUILD)/fuzz-$$t.log | tr "\n" " ")"'

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
