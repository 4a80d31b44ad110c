#!/bin/sh
# tok-venv.sh [DIR] — the Python environment that makes the tokenizer test
# data (tests/golden/make_unigram_tokenizer.py, make_unigram_cases.py,
# scripts/gen_tok_tables.py): sentencepiece, tokenizers, transformers,
# protobuf and regex from PyPI in a virtualenv (default build/venv-tok), so
# Debian's python3 stays untouched. The data it makes is committed: `make test`
# does not need this; `make tokenizer-goldens` does.
set -eu
DIR=${1:-build/venv-tok}
if [ ! -x "$DIR/bin/python" ]; then
    python3 -m venv "$DIR"
fi
if ! "$DIR/bin/python" -c 'import sentencepiece, tokenizers, transformers, google.protobuf, regex' \
    2>/dev/null; then
    "$DIR/bin/pip" install -q sentencepiece tokenizers transformers protobuf regex
fi
echo "$DIR"
