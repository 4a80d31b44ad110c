#!/usr/bin/env python3
"""Makes tests/golden/roberta-tiny-model/, a tiny random-weight RoBERTa
embedder saved as a sentence-transformers directory (Transformer, mean
Pooling, Normalize) with the byte-level BPE tokenizer of
tests/golden/roberta-tiny; and tests/golden/roberta_embeddings.json, the
vectors sentence-transformers computes with it, truncating on the right
("mean_normalized") and, with the tokenizer's truncation_side "left", on the
left ("left_truncated": long runs of newlines among them, whose byte-level
pieces have empty offset spans).

The weights are drawn as make_xlmr_model.py draws them (tiny_model.py's
randomise: every tensor with a spread that makes attention mix tokens and
every position row matter). 2 layers, hidden 64, 4 heads: about 0.4 MB in
fp32, committed, so `make test` needs none of these packages.

Usage (an environment with torch, transformers and sentence-transformers;
~/.cache/attnserve/bench-embed/venv made by `make bench-embed` has them):
    PY tests/golden/make_roberta_model.py
"""
import os
import sys
import tempfile

import torch
from transformers import RobertaConfig, RobertaModel, RobertaTokenizerFast

import golden_io
import tiny_model

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "roberta-tiny", "tokenizer.json")
OUT = os.path.join(HERE, "roberta-tiny-model")
GOLDEN = os.path.join(HERE, "roberta_embeddings.json")

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
    tok = RobertaTokenizerFast(tokenizer_file=TOKENIZER)
    assert tok.pad_token_id == 1 and tok.bos_token_id == 0 and tok.eos_token_id == 2
    cfg = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        hidden_act="gelu",
        max_position_embeddings=MAX_TOKENS + 2,
        type_vocab_size=1,
        layer_norm_eps=1e-5,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
    )
    torch.manual_seed(20261202)
    model = RobertaModel(cfg, add_pooling_layer=False)
    tiny_model.randomise(model)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.model_max_length = MAX_TOKENS
    tok.save_pretrained(tmp)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        build(tmp)
        tiny_model.save_mean_normalized(tmp, OUT, MAX_TOKENS,
                                        ("README.md", "vocab.json", "merges.txt"))

    st = tiny_model.load(OUT)
    right = tiny_model.encode(st, TEXTS)
    st.tokenizer.truncation_side = "left"
    left = tiny_model.encode(st, LEFT)
    for c in left:
        assert len(c["ids"]) == MAX_TOKENS and c["ids"][0] == 0 and c["ids"][-1] == 2, c["text"]
    golden = {
        "model": "tests/golden/roberta-tiny-model",
        "max_tokens": MAX_TOKENS,
        "made_by": "tests/golden/make_roberta_model.py",
        "versions": tiny_model.versions(),
        "mean_normalized": right,
        "left_truncated": left,
    }
    lengths = [len(c["ids"]) for c in right]
    assert max(lengths) == MAX_TOKENS, lengths
    golden_io.dump(golden, GOLDEN)
    size = tiny_model.dir_size(OUT)
    print(f"{OUT}: {size} bytes; {len(TEXTS)} + {len(LEFT)} inputs, tokens "
          f"{min(lengths)}..{max(lengths)}", file=sys.stderr)


if __name__ == "__main__":
    main()
