#!/usr/bin/env python3
"""Writes tests/golden/wordpiece_decode.json.gz: what Hugging Face `tokenizers`
decodes the WordPiece ids of every text of tokenizer_cases.json.gz to, with and
without the special tokens; tests/unit/test_tokenizer_unigram.c checks
tok_decode against it.

Usage: build/venv-tok/bin/python tests/golden/make_wordpiece_decode.py [MODEL_DIR]
(MODEL_DIR defaults to models/all-MiniLM-L6-v2).
"""
import os
import sys

import tokenizers

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    tok = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    corpus = golden_io.load(os.path.join(HERE, "tokenizer_cases.json.gz"))
    texts = [c["text"] for c in corpus["cases"]]
    cases = []
    for text in texts:
        ids = tok.encode(text).ids
        cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True),
                      "decoded_special": tok.decode(ids, skip_special_tokens=False)})
    out = os.path.join(HERE, "wordpiece_decode.json.gz")
    golden_io.dump({"tokenizers_version": tokenizers.__version__, "cases": cases}, out)
    print(out, len(cases), "cases")


if __name__ == "__main__":
    main()
