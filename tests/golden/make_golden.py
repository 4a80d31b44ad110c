#!/usr/bin/env python3
"""make_golden.py — reference embeddings of all-MiniLM-L6-v2 for the C model tests.

Runs sentence-transformers (PyTorch, CPU, float32) on a varied corpus and writes
tests/golden/embeddings.json.gz: for every input its text, the token ids the Hugging
Face tokenizer produced (so the C forward test does not depend on the C
tokenizer) and the pooled, normalised embedding. A second, smaller set runs the
same weights with CLS pooling and no Normalize module, to check those paths.

The main sets are what a default sentence-transformers call gives: sequences
truncated at the model's max_seq_length (256, from sentence_bert_config.json),
as the service does by default. Two more sets keep the cases that truncation
changes: "long_512", the inputs over 256 tokens at max_seq_length 512 (the
model's position limit: the service with max_seq_length=512, and the forward
at full length), and "long_left", the same inputs truncated on the left
(tokenizer truncation_side "left": TEI's truncation_direction Left).

Usage (versions used are recorded in the output):
    python3 -m venv /tmp/stvenv
    /tmp/stvenv/bin/pip install torch sentence-transformers
    (the committed file: torch 2.5.1, transformers 4.46.3, sentence-transformers
    3.3.1; a newer transformers needs a newer torch)
    /tmp/stvenv/bin/python tests/golden/make_golden.py models/all-MiniLM-L6-v2
"""
import platform
import sys

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models

import golden_io

FULL_TOKENS = 512  # max_position_embeddings

LOREM = (
    "The committee met on Tuesday to review the quarterly budget, and after a long "
    "discussion about infrastructure, staffing and the new data centre, it approved "
    "most of the proposals while asking for revised estimates on the remaining ones. "
)


def long_text(words):
    """Prose of about `words` words, varied so that no window repeats exactly."""
    base = LOREM.split()
    out = []
    i = 0
    while len(out) < words:
        out.append(base[i % len(base)])
        if i % 17 == 0:
            out.append(str(i))
        i += 1
    return " ".join(out)


CORPUS = [
    # short and plain
    "Hello",
    "a",
    "",
    "Hello, world!",
    "The quick brown fox jumps over the lazy dog.",
    "What is the capital of France?",
    "Paris is the capital and most populous city of France.",
    "I love machine learning.",
    "Embeddings map text to vectors.",
    "How do I reset my password?",
    "This is a test.",
    "This is a test",
    "THIS IS A TEST.",
    "   leading and trailing spaces   ",
    "tabs\tand\nnewlines\r\nmixed",
    "1234567890 3.14159 -42 1e10",
    "!!!???...,,,;;;:::",
    "e-mail: someone@example.com, url: https://example.org/path?q=1&r=2",
    "int main(void) { return 0; }",
    "def f(x): return x ** 2  # square",
    "supercalifragilisticexpialidocious",
    "antidisestablishmentarianism " * 3,
    "a" * 150,
    "don't won't can't shouldn't y'all",
    "Mr. Smith went to Washington D.C. on Jan. 5th.",
    # accents and Latin-script languages
    "Café au lait, crème brûlée, naïve façade.",
    "Ünïcödé àçcéñts éverywhere",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El rápido zorro marrón salta sobre el perro perezoso.",
    "Tiếng Việt có nhiều dấu thanh.",
    "Zażółć gęślą jaźń.",
    # other scripts
    "我爱自然语言处理。",
    "北京是中华人民共和国的首都。",
    "日本語のテキストも処理できますか？",
    "ひらがなとカタカナ、そして漢字。",
    "한국어 문장도 임베딩할 수 있습니다.",
    "Привет, как дела? Это тест.",
    "Γειά σου Κόσμε",
    "مرحبا بالعالم، هذا اختبار.",
    "שלום עולם",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "สวัสดีชาวโลก",
    "ሰላም ለዓለም",
    "Բարեւ աշխարհ",
    "გამარჯობა მსოფლიო",
    # emoji, symbols, mixed and control characters
    "I love pizza 🍕🍕🍕 and 🐍 python!",
    "👩‍👩‍👧‍👦 family emoji with ZWJ",
    "Mixed: English, 中文, العربية, русский, हिन्दी, 日本語.",
    "math: ∑ x² ≤ ∞, α → β, √2 ≈ 1.414",
    "control\u0000chars\u0007here\u001b[0m and zero\u200bwidth",
    "full‐width ＡＢＣ １２３ and ligature ﬁ",
    # long: over 256 tokens (truncated by default), and over the 512-token limit
    long_text(120),
    long_text(230),
    long_text(300),
    long_text(420),
    long_text(900),
    ("Unicode across scripts: 你好世界 こんにちは 안녕하세요 Привет مرحبا שלום नमस्ते "
     "สวัสดี Γειά ") * 40,
    " ".join(f"token{i}" for i in range(700)),
]

# Inputs for the CLS-pooling, unnormalised variant.
CLS_CORPUS = [
    "Hello, world!",
    "Paris is the capital and most populous city of France.",
    "我爱自然语言处理。",
    "I love pizza 🍕🍕🍕 and 🐍 python!",
    long_text(300),
    long_text(900),
]


def run(model, texts):
    """Embeds texts with model as it is set (max_seq_length, truncation side)."""
    features = model.tokenize(texts)
    ids = [
        [int(t) for t, m in zip(row, mask) if m]
        for row, mask in zip(features["input_ids"].tolist(), features["attention_mask"].tolist())
    ]
    emb = model.encode(texts, batch_size=16, convert_to_numpy=True, normalize_embeddings=False)
    out = []
    for text, row, vec in zip(texts, ids, emb):
        assert len(row) <= model.max_seq_length
        out.append({
            "text": text,
            "ids": row,
            "embedding": [float(f"{x:.9g}") for x in np.asarray(vec, dtype=np.float32)],
        })
    return out


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    torch.manual_seed(0)
    torch.set_num_threads(max(1, torch.get_num_threads()))

    # A default call: max_seq_length from sentence_bert_config.json.
    full = SentenceTransformer(model_dir, device="cpu")
    modules = [type(m).__name__ for m in full]
    assert modules == ["Transformer", "Pooling", "Normalize"], modules
    max_tokens = full.max_seq_length
    assert max_tokens == 256, max_tokens

    transformer = models.Transformer(model_dir, max_seq_length=max_tokens)
    dim = full.get_sentence_embedding_dimension()
    cls = SentenceTransformer(modules=[transformer, models.Pooling(dim, "cls")], device="cpu")

    golden = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "max_tokens": max_tokens,
        "full_tokens": FULL_TOKENS,
        "made_by": "tests/golden/make_golden.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
            "numpy": np.__version__,
        },
        "mean_normalized": run(full, CORPUS),
        "cls_raw": run(cls, CLS_CORPUS),
    }
    # The inputs truncation cuts, at the model's full length and cut on the left.
    full_ids = full.tokenizer(CORPUS, truncation=False)["input_ids"]
    long = [t for t, ids in zip(CORPUS, full_ids) if len(ids) > max_tokens]
    full.max_seq_length = FULL_TOKENS
    golden["long_512"] = run(full, long)
    full.max_seq_length = max_tokens
    full.tokenizer.truncation_side = "left"
    golden["long_left"] = run(full, long)
    full.tokenizer.truncation_side = "right"

    lengths = [len(x["ids"]) for x in golden["mean_normalized"]]
    print(f"{len(lengths)} inputs, tokens min {min(lengths)} max {max(lengths)}, "
          f"= {max_tokens}: {sum(n == max_tokens for n in lengths)}; "
          f"{len(long)} long inputs also at {FULL_TOKENS} and cut on the left",
          file=sys.stderr)
    golden_io.dump(golden, "tests/golden/embeddings.json.gz")


if __name__ == "__main__":
    main()
