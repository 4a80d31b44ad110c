#!/usr/bin/env python3
"""Makes tests/golden/mpnet-tiny-model/, a tiny random-weight MPNet embedder
saved as a sentence-transformers directory laid out as
sentence-transformers/all-mpnet-base-v2 is (Transformer with max_seq_length
384, mean Pooling, Normalize), and tests/golden/mpnet_embeddings.json: the
vectors sentence-transformers computes with it, and the bucket that
transformers' MPNetEncoder.relative_position_bucket gives every relative
position in [-RANGE, RANGE].

The tokenizer is MPNet's layout written by `tokenizers`: BertNormalizer
(lowercase), BertPreTokenizer, WordPiece with <s> <pad> </s> <unk> at ids
0..3 and <mask> added last, TemplateProcessing `<s> $A </s>`, trained here on
the texts below (at most 1,000 pieces; they give about 300). Two runs need
not train the same vocabulary, so the model and the golden are made and
committed together. <mask> is an added token with lstrip, as
all-mpnet-base-v2's is.

2 layers, hidden 32, 4 heads, 514 position rows (padding_idx 1, then 512
positions, as the real checkpoint): about 0.3 MB in fp32, committed, so
`make test` needs none of these packages. Every tensor, the relative
attention bias table among them, is drawn with a spread that makes it move
the vectors far past the tests' floors; inputs reach 384 tokens, so distances
past max_distance 128 (the clamped buckets) are exercised.

Usage (an environment with torch, transformers, tokenizers and
sentence-transformers, as `make task-models` makes):
    PY tests/golden/make_mpnet_model.py
"""
import json
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
from sentence_transformers import SentenceTransformer, models
from tokenizers import AddedToken, BertWordPieceTokenizer
from tokenizers.processors import TemplateProcessing
from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "mpnet-tiny-model")
GOLDEN = os.path.join(HERE, "mpnet_embeddings.json")
MAX_TOKENS = 384  # all-mpnet-base-v2's max_seq_length
POSITIONS = 512   # its max_position_embeddings is 514: padding_idx 1, then 512
RANGE = 1100      # relative positions whose bucket the golden records

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors; the reranker scores each passage.",
    "A sentence encoder reads every token and pools them into one vector.",
    "What is the capital of Bulgaria? Sofia is the capital and largest city.",
    "Maputo is the capital of Mozambique, on the Indian Ocean.",
    "Relative position buckets let attention know how far apart two tokens are.",
    "Search engines rank documents by their relevance to a query.",
    "Numbers 3.14 and 2024-05-01, e-mail a@b.c, path/to/file.txt",
    "Café au lait, naïve façade, crème brûlée and a piñata.",
    "Questions and answers: how do rerankers work, and why are they slow?",
]

TEXTS = CORPUS + [
    "Hello",
    "",
    "short",
    "  leading spaces, trailing spaces  ",
    "Tabs\tand\nnew\nlines\r\nmixed",
    "unknown words like xylophone zebra quokka",
    "敏捷的棕色狐狸跳过了懒狗。",
    "I love pizza 🍕🍕 and 🐍!",
    "a <mask> in the text",
    "The quick brown fox jumps over the lazy dog. " * 4,
    "Search engines rank documents by their relevance to a query. " * 12,
    "Relative position buckets let attention know how far apart two tokens are. " * 20,
    " ".join(CORPUS) * 4,
    "word " * 500,
]


def randomise(model, seed):
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "relative_attention_bias" in name:
                # Larger than the scores' spread, so each bucket steers
                # attention and the vectors depend on every one of them.
                p.normal_(0.0, 4.0)
            elif "embeddings" in name:
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.15)
    model.eval()


def mpnet_tokenizer():
    wp = BertWordPieceTokenizer(lowercase=True, unk_token="<unk>")
    wp.train_from_iterator(CORPUS * 4, vocab_size=1000, min_frequency=1,
                           special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    inner = wp._tokenizer
    inner.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    bos, eos = inner.token_to_id("<s>"), inner.token_to_id("</s>")
    assert (bos, inner.token_to_id("<pad>"), eos, inner.token_to_id("<unk>")) == (0, 1, 2, 3)
    inner.post_processor = TemplateProcessing(
        single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
        special_tokens=[("<s>", bos), ("</s>", eos)])
    tok = MPNetTokenizerFast(tokenizer_object=inner, bos_token="<s>", eos_token="</s>",
                             sep_token="</s>", cls_token="<s>", unk_token="<unk>",
                             pad_token="<pad>", mask_token="<mask>", do_lower_case=True)
    tok.model_max_length = MAX_TOKENS
    assert tok("the quick fox")["input_ids"].count(tok.unk_token_id) == 0
    return tok, inner


def build(tmp):
    tok, inner = mpnet_tokenizer()
    cfg = MPNetConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                      max_position_embeddings=POSITIONS + 2, layer_norm_eps=1e-5,
                      relative_attention_num_buckets=32, pad_token_id=1, bos_token_id=0,
                      eos_token_id=2)
    model = MPNetModel(cfg, add_pooling_layer=False)
    randomise(model, 20261205)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    return inner


def encode(st, texts):
    features = st.tokenize(texts)
    ids = [[int(t) for t, m in zip(row, mask) if m]
           for row, mask in zip(features["input_ids"].tolist(),
                                features["attention_mask"].tolist())]
    emb = st.encode(texts, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    return [{"text": t, "ids": i,
             "embedding": [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float32)]}
            for t, i, v in zip(texts, ids, emb)]


def main():
    with tempfile.TemporaryDirectory() as tmp:
        inner = build(tmp)
        transformer = models.Transformer(tmp, max_seq_length=MAX_TOKENS)
        dim = transformer.get_word_embedding_dimension()
        st = SentenceTransformer(
            modules=[transformer, models.Pooling(dim, "mean"), models.Normalize()], device="cpu")
        shutil.rmtree(OUT, ignore_errors=True)
        st.save(OUT)
    for name in ("README.md", "vocab.txt"):
        if os.path.exists(os.path.join(OUT, name)):
            os.remove(os.path.join(OUT, name))
    # transformers' MPNetTokenizerFast saves a RobertaProcessing; the
    # checkpoints on the Hub carry the TemplateProcessing `tokenizers` writes,
    # which is what the directory keeps (the same ids, checked below).
    inner.save(os.path.join(OUT, "tokenizer.json"))
    # sentence-transformers 6 keeps max_seq_length in tokenizer_config.json's
    # model_max_length; all-mpnet-base-v2 on the Hub (and the service) has it
    # in sentence_bert_config.json: written there too.
    sbert = os.path.join(OUT, "sentence_bert_config.json")
    with open(sbert, encoding="utf-8") as f:
        conf = json.load(f)
    conf["max_seq_length"] = MAX_TOKENS
    with open(sbert, "w", encoding="utf-8") as f:
        json.dump(conf, f, indent=2)
        f.write("\n")

    st = SentenceTransformer(OUT, device="cpu")
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Normalize"]
    cases = encode(st, TEXTS)
    lengths = [len(c["ids"]) for c in cases]
    plain = tokenizers.Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))
    for c in cases:
        want = plain.encode(c["text"]).ids
        if len(want) <= MAX_TOKENS:
            assert want == c["ids"], c["text"]
    assert max(lengths) == MAX_TOKENS and sum(n > 129 for n in lengths) >= 3, lengths
    rel = torch.arange(-RANGE, RANGE + 1)
    buckets = MPNetEncoder.relative_position_bucket(rel).tolist()
    golden = {
        "model": "tests/golden/mpnet-tiny-model",
        "max_tokens": MAX_TOKENS,
        "made_by": "tests/golden/make_mpnet_model.py",
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "sentence_transformers": sentence_transformers.__version__,
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "mean_normalized": cases,
        # buckets[i] is the bucket of relative position (key - query) i - RANGE.
        "bucket_range": RANGE,
        "buckets": buckets,
    }
    golden_io.dump(golden, GOLDEN)
    size = sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(OUT) for n in ns)
    print(f"{OUT}: {size} bytes; {len(TEXTS)} inputs, tokens {min(lengths)}..{max(lengths)}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
