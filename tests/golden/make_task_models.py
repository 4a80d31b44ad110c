#!/usr/bin/env python3
"""Makes the tiny random-weight models of the task heads and the
sentence-transformers modules beyond mean/CLS pooling, and
tests/golden/task_outputs.json, what transformers and sentence-transformers
compute with them:

  bert-cls-tiny      BertForSequenceClassification, 3 labels with id2label,
                     token types (pairs: [CLS] a [SEP] b [SEP], types 0..0 1..1)
  xlmr-cls-tiny      XLMRobertaForSequenceClassification, 1 label: a
                     cross-encoder saved by sentence-transformers' CrossEncoder
  st-dense-max-tiny  BERT, max pooling, Dense (Tanh), Dense (Identity, no
                     bias), Normalize
  st-meansqrt-tiny   XLM-R, mean_sqrt_len_tokens pooling, Dense (Tanh)
  st-lasttoken-tiny  BERT, lasttoken pooling, Normalize

The BERT models share a WordPiece vocabulary of 600 pieces trained here with
`tokenizers` on the texts below; the XLM-R models use the SentencePiece
tokenizer of tests/golden/xlmr-tiny. Every tensor is drawn with a spread
large enough that each one moves the outputs far past the tests' floors (as
make_xlmr_model.py does), so a skipped or misnamed tensor fails. Each model
is under 0.5 MB and committed with the outputs, so `make test` needs none of
these packages.

Usage (an environment with torch, transformers, tokenizers and
sentence-transformers: `make task-models` makes it, or the bench's venv at
~/.cache/attnserve/bench-embed/venv has them):
    PY tests/golden/make_task_models.py
"""
import os
import platform
import shutil
import sys
import tempfile

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import CrossEncoder, SentenceTransformer, models
from tokenizers import BertWordPieceTokenizer
from tokenizers.processors import TemplateProcessing
from transformers import (BertConfig, BertForSequenceClassification, BertModel,
                          BertTokenizerFast, XLMRobertaConfig,
                          XLMRobertaForSequenceClassification, XLMRobertaModel,
                          XLMRobertaTokenizerFast)

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))
XLMR_TOKENIZER = os.path.join(HERE, "xlmr-tiny", "tokenizer.json")
GOLDEN = os.path.join(HERE, "task_outputs.json")
MAX_TOKENS = 64

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors; the reranker scores each passage.",
    "A cross-encoder reads the query and the document together.",
    "What is the capital of Bulgaria? Sofia is the capital and largest city.",
    "Maputo is the capital of Mozambique, on the Indian Ocean.",
    "The movie was wonderful, I loved every minute of it.",
    "The service was slow and the food was cold.",
    "It was an ordinary day, neither good nor bad.",
    "Search engines rank documents by their relevance to a query.",
    "Sentence transformers pool token vectors into one embedding.",
]

TEXTS = CORPUS + [
    "Hello",
    "",
    "café naïve façade — unknown words like xylophone zebra",
    "short",
    ("Search engines rank documents by their relevance to a query. " * 8),
]

PAIRS = [
    ("What is the capital of Bulgaria?", "Sofia is the capital and largest city."),
    ("What is the capital of Bulgaria?", "The quick brown fox jumps over the lazy dog."),
    ("Where is Maputo?", "Maputo is the capital of Mozambique, on the Indian Ocean."),
    ("how do rerankers work", "A cross-encoder reads the query and the document together."),
    ("", "an empty query"),
    ("a long document follows", "Search engines rank documents by relevance. " * 12),
]


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "embeddings" in name:
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.15)
    model.eval()


def bert_tokenizer():
    """A WordPiece tokenizer laid out as BERT checkpoints ship it:
    BertNormalizer, BertPreTokenizer, WordPiece, and TemplateProcessing with
    the pair template that gives the second segment type 1."""
    wp = BertWordPieceTokenizer(lowercase=True)
    wp.train_from_iterator(CORPUS * 4, vocab_size=600, min_frequency=1,
                           special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    inner = wp._tokenizer
    cls, sep = inner.token_to_id("[CLS]"), inner.token_to_id("[SEP]")
    inner.post_processor = TemplateProcessing(
        single="[CLS] $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok = BertTokenizerFast(tokenizer_object=inner, unk_token="[UNK]", sep_token="[SEP]",
                            pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]",
                            do_lower_case=True)
    tok.model_max_length = MAX_TOKENS
    assert tok("the quick fox")["input_ids"].count(tok.unk_token_id) == 0
    return tok


def bert_config(tok, **kw):
    return BertConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                      max_position_embeddings=MAX_TOKENS, type_vocab_size=2,
                      layer_norm_eps=1e-12, pad_token_id=0, **kw)


def xlmr_tokenizer():
    tok = XLMRobertaTokenizerFast(tokenizer_file=XLMR_TOKENIZER)
    tok.model_max_length = MAX_TOKENS
    return tok


def xlmr_config(tok, **kw):
    return XLMRobertaConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                            max_position_embeddings=MAX_TOKENS + 2, type_vocab_size=1,
                            layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0,
                            eos_token_id=2, **kw)


def tidy(out):
    for name in ("README.md", "sentencepiece.bpe.model"):
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))


def floats(v):
    return [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float32).reshape(-1)]


def make_classifier(name, tok, cls, cfg, seed, pairs, cross_encoder):
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    model = cls(cfg)
    randomise(model, seed)
    if cross_encoder:
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp, safe_serialization=True)
            tok.save_pretrained(tmp)
            ce = CrossEncoder(tmp, max_length=MAX_TOKENS, device="cpu")
            ce.save_pretrained(out)
    else:
        model.save_pretrained(out, safe_serialization=True)
        tok.save_pretrained(out)
    tidy(out)
    # The reference: transformers on the saved directory, logits raw.
    ref = transformers.AutoModelForSequenceClassification.from_pretrained(out).eval()
    rtok = transformers.AutoTokenizer.from_pretrained(out)
    cases = []
    for a, b in pairs:
        enc = rtok(a, b, truncation="longest_first", max_length=MAX_TOKENS,
                   return_tensors="pt") if b is not None else rtok(
                       a, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        with torch.no_grad():
            logits = ref(**enc).logits[0]
        types = enc.get("token_type_ids")
        cases.append({
            "text": a, "text_pair": b,
            "ids": enc["input_ids"][0].tolist(),
            "type_ids": types[0].tolist() if types is not None else None,
            "logits": floats(logits),
        })
    if cross_encoder:
        # CrossEncoder's own scores, without its activation, agree.
        ce = CrossEncoder(out, device="cpu")
        got = ce.predict([(a, b) for a, b in pairs], activation_fn=torch.nn.Identity(),
                         convert_to_numpy=True)
        want = np.array([c["logits"][0] for c in cases])
        assert np.abs(got.reshape(-1) - want).max() < 1e-5, (got, want)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(out) for n in ns)
    print(f"{out}: {size} bytes", file=sys.stderr)
    assert size < 1 << 20
    return {"dir": f"tests/golden/{name}", "architecture": cfg.architectures[0]
            if cfg.architectures else cls.__name__,
            "num_labels": cfg.num_labels, "labels": [cfg.id2label[i] for i in range(cfg.num_labels)],
            "cases": cases}


def make_embedder(name, tok, base_cls, cfg, seed, pooling, dense, normalize):
    out = os.path.join(HERE, name)
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = base_cls(cfg, add_pooling_layer=False)
        randomise(model, seed)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        transformer = models.Transformer(tmp, max_seq_length=MAX_TOKENS)
        dim = transformer.get_word_embedding_dimension()
        mods = [transformer, models.Pooling(dim, pooling)]
        torch.manual_seed(seed + 1)
        for out_features, bias, act, std in dense:
            d = models.Dense(dim, out_features, bias=bias, activation_function=act)
            with torch.no_grad():
                d.linear.weight.normal_(0.0, std)
                if bias:
                    d.linear.bias.normal_(0.0, 0.4)
            mods.append(d)
            dim = out_features
        if normalize:
            mods.append(models.Normalize())
        SentenceTransformer(modules=mods, device="cpu").save(out)
    tidy(out)
    st = SentenceTransformer(out, device="cpu")
    features = st.tokenize(TEXTS)
    ids = [[int(t) for t, m in zip(row, mask) if m]
           for row, mask in zip(features["input_ids"].tolist(),
                                features["attention_mask"].tolist())]
    emb = st.encode(TEXTS, batch_size=4, convert_to_numpy=True, normalize_embeddings=False)
    # Tanh kept out of saturation, where it would hide errors before it.
    assert np.mean(np.abs(emb) > 0.99) < 0.05, np.mean(np.abs(emb) > 0.99)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(out) for n in ns)
    print(f"{out}: {size} bytes; modules {[type(m).__name__ for m in st]}", file=sys.stderr)
    assert size < 1 << 20
    assert max(len(i) for i in ids) == MAX_TOKENS
    return {"dir": f"tests/golden/{name}", "pooling": pooling, "output_dim": dim,
            "normalize": normalize,
            "cases": [{"text": t, "ids": i, "embedding": floats(v)}
                      for t, i, v in zip(TEXTS, ids, emb)]}


def main():
    with tempfile.TemporaryDirectory() as tmp:
        wp = bert_tokenizer()
        xt = xlmr_tokenizer()
        golden = {
            "made_by": "tests/golden/make_task_models.py",
            "max_tokens": MAX_TOKENS,
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "sentence_transformers": sentence_transformers.__version__,
                "transformers": transformers.__version__,
                "tokenizers": tokenizers.__version__,
            },
            "classifiers": {
                "bert-cls-tiny": make_classifier(
                    "bert-cls-tiny", wp, BertForSequenceClassification,
                    bert_config(wp, num_labels=3, architectures=["BertForSequenceClassification"],
                                id2label={0: "negative", 1: "neutral", 2: "positive"},
                                label2id={"negative": 0, "neutral": 1, "positive": 2},
                                problem_type="single_label_classification"),
                    20261201, PAIRS + [(t, None) for t in TEXTS[5:8]], False),
                "xlmr-cls-tiny": make_classifier(
                    "xlmr-cls-tiny", xt, XLMRobertaForSequenceClassification,
                    xlmr_config(xt, num_labels=1,
                                architectures=["XLMRobertaForSequenceClassification"]),
                    20261202, PAIRS, True),
            },
            "embedders": {
                "st-dense-max-tiny": make_embedder(
                    "st-dense-max-tiny", wp, BertModel, bert_config(wp), 20261203, "max",
                    [(24, True, torch.nn.Tanh(), 0.15), (16, False, torch.nn.Identity(), 0.4)], True),
                "st-meansqrt-tiny": make_embedder(
                    "st-meansqrt-tiny", xt, XLMRobertaModel, xlmr_config(xt), 20261204,
                    "mean_sqrt_len_tokens", [(20, True, torch.nn.Tanh(), 0.04)], False),
                "st-lasttoken-tiny": make_embedder(
                    "st-lasttoken-tiny", wp, BertModel, bert_config(wp), 20261205, "lasttoken",
                    [], True),
            },
        }
    golden_io.dump(golden, GOLDEN)


if __name__ == "__main__":
    main()
