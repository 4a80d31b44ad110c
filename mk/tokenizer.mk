# mk/tokenizer.mk — the tokenizer test data, remade from PyPI packages.
#
#   make tokenizer-goldens   retrain the tiny SentencePiece model, convert it
#                            with transformers (tests/golden/xlmr-tiny) and
#                            write the Hugging Face `tokenizers` goldens
#                            (unigram_cases.json.gz, unigram-*/,
#                            roberta-tiny/, wordpiece_decode.json.gz, the
#                            Unicode normalizer variants unigram-nf*/, the
#                            Split layouts split-*/, the families' layouts
#                            fam-*/, pair_cases.json.gz with
#                            pair-*/; tests/golden/golden_io.py writes them);
#                            then regenerate model/tok_tables.c and
#                            model/unicode_norm.c
#
# The results are committed, so `make test` needs none of these packages; the
# virtualenv (scripts/tok-venv.sh, build/venv-tok) is made on first use.

TOK_VENV := build/venv-tok

.PHONY: tokenizer-goldens

tokenizer-goldens: model
	@scripts/tok-venv.sh $(TOK_VENV) >/dev/null
	$(TOK_VENV)/bin/python tests/golden/make_unigram_tokenizer.py
	$(TOK_VENV)/bin/python tests/golden/make_unigram_cases.py
	$(TOK_VENV)/bin/python tests/golden/make_normalizer_cases.py
	$(TOK_VENV)/bin/python tests/golden/make_split_cases.py
	$(TOK_VENV)/bin/python tests/golden/make_family_tokenizers.py
	$(TOK_VENV)/bin/python tests/golden/make_wordpiece_decode.py $(MODEL_DIR)
	$(TOK_VENV)/bin/python tests/golden/make_pair_cases.py $(MODEL_DIR)
	$(TOK_VENV)/bin/python scripts/gen_tok_tables.py > model/tok_tables.c
	$(TOK_VENV)/bin/python scripts/gen_unicode_norm.py > model/unicode_norm.c
