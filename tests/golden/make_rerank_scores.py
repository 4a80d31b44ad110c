#!/usr/bin/env python3
"""Writes tests/golden/rerank_scores.json: what sentence-transformers'
CrossEncoder and transformers compute with the tiny classifiers of
make_task_models.py (tests/golden/xlmr-cls-tiny, a one-label XLM-R
cross-encoder; tests/golden/bert-cls-tiny, a three-label BERT classifier with
token types) on queries and documents in many scripts, some long enough to be
cut to the models' 64 tokens. tests/e2e/test_rerank.py compares the service's
/rerank, /v1/rerank, /predict and /classify with it.

For each model and query: the documents' CrossEncoder scores with its default
activation (sigmoid for one label, none for three), the raw logits, and the
logits when the pair is cut on the left (transformers with truncation_side
"left"; CrossEncoder has no such option). For the classifier, also each text
alone.

Usage (an environment with torch, transformers and sentence-transformers;
~/.cache/attnserve/bench-embed/venv made by `make bench-embed` has them):
    PY tests/golden/make_rerank_scores.py
"""
import os
import platform

import numpy as np
import sentence_transformers
import torch
import transformers
from sentence_transformers import CrossEncoder

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "rerank_scores.json")
MAX_TOKENS = 64

QUERIES = [
    "what is the capital of France?",
    "Къде се обработват документите?",
    "Xana Xitsonga xi vulavuriwa kwihi?",
    "检索系统如何排序？",
    "ما هي عاصمة فرنسا؟",
]

DOCUMENTS = [
    "Paris is the capital and largest city of France.",
    "Документите се обработват в София, а резултатите се пращат по пощата.",
    "Xitsonga xi vulavuriwa eAfrika Dzonga na le Mozambique.",
    "检索系统将查询与文档配对，并按相似度排序。",
    "الثعلب البني السريع يقفز فوق الكلب الكسول.",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    "😀 🍕 👍🏽 emoji and café naïve ﬁ",
    "a",
    # longer than the models' 64 tokens with any query: cut longest_first
    "Embeddings map sentences to vectors, and rerankers read a query with each document. " * 4,
    "Документите се обработват в София. " * 8,
]


def floats(v):
    return [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float32).reshape(-1)]


def logits(model, tok, pairs):
    enc = tok([a for a, _ in pairs], [b for _, b in pairs], truncation="longest_first",
              max_length=MAX_TOKENS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.numpy(), enc["input_ids"].numpy(), enc["attention_mask"].numpy()


def singles(model, tok, texts):
    enc = tok(texts, truncation=True, max_length=MAX_TOKENS, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**enc).logits.numpy()


def model_cases(name):
    d = os.path.join(HERE, name)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(d).eval()
    right = transformers.AutoTokenizer.from_pretrained(d)
    left = transformers.AutoTokenizer.from_pretrained(d, truncation_side="left")
    ce = CrossEncoder(d, device="cpu", max_length=MAX_TOKENS)
    out = []
    for q in QUERIES:
        pairs = [(q, doc) for doc in DOCUMENTS]
        raw, ids, mask = logits(model, right, pairs)
        raw_left, _, _ = logits(model, left, pairs)
        scores = ce.predict(pairs, convert_to_numpy=True)
        ce_raw = ce.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True)
        assert np.abs(ce_raw.reshape(raw.shape) - raw).max() < 1e-5
        out.append({
            "query": q,
            "documents": DOCUMENTS,
            "scores": [floats(s) for s in np.asarray(scores).reshape(len(pairs), -1)],
            "logits": [floats(r) for r in raw],
            "logits_left": [floats(r) for r in raw_left],
            "tokens": [int(m.sum()) for m in mask],
        })
    texts = QUERIES + DOCUMENTS
    return {
        "dir": f"tests/golden/{name}",
        "num_labels": model.config.num_labels,
        "labels": [model.config.id2label[i] for i in range(model.config.num_labels)],
        "activation": type(ce.activation_fn).__name__,
        "queries": out,
        "texts": texts,
        "text_logits": [floats(r) for r in singles(model, right, texts)],
    }


def main():
    golden = {
        "made_by": "tests/golden/make_rerank_scores.py",
        "max_tokens": MAX_TOKENS,
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
        },
        "models": {name: model_cases(name) for name in ("xlmr-cls-tiny", "bert-cls-tiny")},
    }
    golden_io.dump(golden, OUT)


if __name__ == "__main__":
    main()
