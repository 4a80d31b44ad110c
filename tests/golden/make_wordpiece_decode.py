#!/usr/bin/env python3
"""Writes tests/golden/wordpiece_decode.json: what Hugging Face `tokenizers`
decodes the WordPiece ids of every text of tokenizer_cases.json to, with and
without the special tokens; tests/unit/test_tokenizer_unigram.c checks
tok_decode against it.

Usage: build/venv-tok/bin/python tests/golden/make_wordpiece_decode.py [MODEL_DIR]
(MODEL_DIR defaults to models/all-MiniLM-L6-v2).
"""
import json
import os
import sys

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    model = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    tok = tokenizers.Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    with open(os.path.join(HERE, "tokenizer_cases.json"), encoding="utf-8") as f:
        texts = [c["text"] for c in json.load(f)["cases"]]
    cases = []
    for text in texts:
        ids = tok.encode(text).ids
        cases.append({"ids": ids, "decoded": tok.decode(ids, skip_special_tokens=True),
                      "decoded_special": tok.decode(ids, skip_special_tokens=False)})
    out = os.path.join(HERE, "wordpiece_decode.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__, "cases": cases}, f,
                  ensure_ascii=True, indent=0)
    print(out, len(cases), "cases")


if __name__ == "__main__":
    main()
