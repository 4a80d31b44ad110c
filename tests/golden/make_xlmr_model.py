#!/usr/bin/env python3
"""Makes tests/golden/xlmr-tiny-model/, a tiny random-weight XLM-RoBERTa
embedder saved as a sentence-transformers directory (Transformer, mean
Pooling, Normalize: the layout of multilingual-e5 and
paraphrase-multilingual-MiniLM), with the real SentencePiece tokenizer of
tests/golden/xlmr-tiny; and tests/golden/xlmr_embeddings.json, the vectors
sentence-transformers computes with it on texts in many scripts.

The weights are random but not HF's initialisation: every tensor, biases and
LayerNorms included, is drawn with a spread large enough that attention
mixes tokens and every position row matters, so a wrong position numbering
or a skipped tensor moves the vectors far past the test's floor. The model
is 2 layers, hidden 64, 4 heads, about 0.4 MB in fp32, and is committed, so
`make test` needs none of these packages.

Usage (an environment with torch, transformers and sentence-transformers;
~/.cache/attnserve/bench-embed/venv made by `make bench-embed` has them):
    PY tests/golden/make_xlmr_model.py
"""
import os
import sys
import tempfile

import torch
from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

import golden_io
import tiny_model

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "xlmr-tiny", "tokenizer.json")
OUT = os.path.join(HERE, "xlmr-tiny-model")
GOLDEN = os.path.join(HERE, "xlmr_embeddings.json")

# 130 position rows: padding_idx 1 and then 128 positions, so the longest
# input (truncated by sentence-transformers at 128) uses the table's last row.
MAX_TOKENS = 128

TEXTS = [
    "Hello",
    "",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors; the reranker scores each passage.",
    # Bulgarian
    "Бързата кафява лисица прескача мързеливото куче.",
    "Системата за търсене намира най-близките текстове в София.",
    # Xitsonga (Tsonga)
    "Ndzi tsakile ku mi vona. Xitsonga xi vulavuriwa eMozambique.",
    "Vana va dyondza exikolweni siku na siku.",
    # Chinese, Japanese, Korean
    "敏捷的棕色狐狸跳过了懒狗。",
    "日本語のテキストも処理できますか？",
    "한국어 문장도 임베딩할 수 있습니다.",
    # Arabic, Hebrew, Hindi, Thai, Greek, Georgian, Amharic
    "مرحبا بالعالم، هذا اختبار.",
    "שלום עולם",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "สวัสดีชาวโลก",
    "Γειά σου Κόσμε",
    "გამარჯობა მსოფლიო",
    "ሰላም ለዓለም",
    # accents, full width, ligatures, emoji: the Precompiled normaliser's work
    "Café au lait, crème brûlée, naïve façade. Tiếng Việt.",
    "full‐width ＡＢＣ １２３ and ligature ﬁ",
    "I love pizza 🍕🍕 and 🐍!",
    "Mixed: English, 中文, العربية, русский, Xitsonga, български.",
    # the padding id written in the text: HF tokenizes it as <pad> and gives
    # it the position padding_idx, every later token one position less
    "before <pad> after <pad><pad> end",
    # longer than MAX_TOKENS: truncated, the last position row is used
    ("Бързата кафява лисица прескача мързеливото куче. "
     "Nhlangano wa vanhu wu hlengeletana emugangeni. 检索系统将查询与文档配对。 ") * 6,
]


def build(tmp):
    """The random XLMRobertaModel and the fast tokenizer, saved to tmp."""
    tok = XLMRobertaTokenizerFast(tokenizer_file=TOKENIZER)
    assert tok.pad_token_id == 1 and tok.bos_token_id == 0 and tok.eos_token_id == 2
    cfg = XLMRobertaConfig(
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
        add_pooling_layer=False,
    )
    torch.manual_seed(20260513)
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    tiny_model.randomise(model)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.model_max_length = MAX_TOKENS
    tok.save_pretrained(tmp)


def main():
    with tempfile.TemporaryDirectory() as tmp:
        build(tmp)
        # The model card and the slow tokenizer's leftovers are not needed.
        tiny_model.save_mean_normalized(tmp, OUT, MAX_TOKENS,
                                        ("README.md", "sentencepiece.bpe.model"))

    st = tiny_model.load(OUT)
    cases = tiny_model.encode(st, TEXTS)
    ids = [c["ids"] for c in cases]
    golden = {
        "model": "tests/golden/xlmr-tiny-model",
        "max_tokens": MAX_TOKENS,
        "made_by": "tests/golden/make_xlmr_model.py",
        "versions": tiny_model.versions(),
        "mean_normalized": cases,
    }
    lengths = [len(i) for i in ids]
    assert max(lengths) == MAX_TOKENS, lengths
    assert any(1 in i for i in ids), "no input holds the padding id"
    golden_io.dump(golden, GOLDEN)
    size = tiny_model.dir_size(OUT)
    print(f"{OUT}: {size} bytes; {len(TEXTS)} inputs, tokens {min(lengths)}..{max(lengths)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
