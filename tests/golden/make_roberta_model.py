#!/usr/bin/env python3
"""Makes tests/golden/roberta-tiny-model/, a tiny random-weight RoBERTa
embedder saved as a sentence-transformers directory (Transformer, mean
Pooling, Normalize) with the byte-level BPE tokenizer of
tests/golden/roberta-tiny; and tests/golden/roberta_embeddings.json, the
vectors sentence-transformers computes with it, truncating on the right
("mean_normalized") and, with the tokenizer's truncation_side "left", on the
left ("left_truncated": long runs of newlines among them, whose byte-level
pieces have empty offset spans).

The weights are drawn as make_xlmr_model.py draws them (family_models.py's
encoder_spread: every tensor with a spread that makes attention mix tokens
and every position row matter). 2 layers, hidden 64, 4 heads: about 0.4 MB
in fp32, committed, so `make test` needs none of these packages. Run as
family_models.py says.
"""
from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

import family_models as fm

TOKENIZER = fm.golden_dir("roberta-tiny/tokenizer.json")
OUT = fm.golden_dir("roberta-tiny-model")
GOLDEN = fm.golden_dir("roberta_embeddings.json")

# 130 position rows: padding_idx 1 and then 128 positions.
MAX_TOKENS = 128

TEXTS = [
    "Hello",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors; the reranker scores each passage.",
    "  leading spaces, trailing spaces  ",
    "Tabs\tand\nnew\nlines\r\nmixed",
    "Numbers 3.14 and 2024-05-01, e-mail a@b.c, path/to/file.txt",
    "Бързата кафява лисица прескача мързеливото куче.",
    "Ndzi tsakile ku mi vona. Xitsonga xi vulavuriwa eMozambique.",
    "敏捷的棕色狐狸跳过了懒狗。",
    "مرحبا بالعالم، هذا اختبار.",
    "Café au lait, naïve façade. Tiếng Việt.",
    "I love pizza 🍕🍕 and 🐍!",
    "a <mask> in the text",
    "\n" * 40,
    ("The quick brown fox jumps over the lazy dog. Бързата кафява лисица. "
     "敏捷的棕色狐狸。 ") * 8,
]

# Left truncation keeps the last pieces: long inputs only, newlines first.
LEFT = [
    "\n" * 300,
    "start " + "\n" * 400 + " end",
    "word\n" * 200,
    ("The quick brown fox jumps over the lazy dog. ") * 20 + "The last words count.",
    "\r\n" * 150 + "tail",
]


def build(tmp):
    """The random RobertaModel and the fast tokenizer, saved to tmp, as a
    SentenceTransformer."""
    return fm.roberta_dir(tmp, (RobertaTokenizerFast, RobertaConfig, RobertaModel), TOKENIZER,
                          20261202, MAX_TOKENS)


def main():
    fm.save_dir(build, OUT)
    fm.remove_files(OUT, ("README.md", "vocab.json", "merges.txt"))
    st = fm.load_as_saved(OUT)
    right = fm.encode(st, TEXTS)
    st.tokenizer.truncation_side = "left"
    left = fm.encode(st, LEFT)
    for c in left:
        assert len(c["ids"]) == MAX_TOKENS and c["ids"][0] == 0 and c["ids"][-1] == 2, c["text"]
    assert max(len(c["ids"]) for c in right) == MAX_TOKENS
    fm.write_float32_golden(GOLDEN, OUT, MAX_TOKENS,
                            {"mean_normalized": right, "left_truncated": left})


if __name__ == "__main__":
    main()
