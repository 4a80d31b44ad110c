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
`make test` needs none of these packages. Run as family_models.py says.
"""
from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

import family_models as fm

TOKENIZER = fm.golden_dir("xlmr-tiny/tokenizer.json")
OUT = fm.golden_dir("xlmr-tiny-model")
GOLDEN = fm.golden_dir("xlmr_embeddings.json")

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
    """The random XLMRobertaModel and the fast tokenizer, saved to tmp, as
    a SentenceTransformer."""
    return fm.roberta_dir(tmp, (XLMRobertaTokenizerFast, XLMRobertaConfig, XLMRobertaModel),
                          TOKENIZER, 20260513, MAX_TOKENS, add_pooling_layer=False)


def main():
    fm.save_dir(build, OUT)
    # The model card and the slow tokenizer's leftovers are not needed.
    fm.remove_files(OUT, ("README.md", "sentencepiece.bpe.model"))
    cases = fm.encode(fm.load_as_saved(OUT), TEXTS)
    ids = [c["ids"] for c in cases]
    assert max(len(i) for i in ids) == MAX_TOKENS, ids
    assert any(1 in i for i in ids), "no input holds the padding id"
    fm.write_float32_golden(GOLDEN, OUT, MAX_TOKENS, {"mean_normalized": cases})


if __name__ == "__main__":
    main()
