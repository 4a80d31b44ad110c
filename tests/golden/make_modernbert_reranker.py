#!/usr/bin/env python3
"""Makes tests/golden/modernbert-rerank-tiny/, a tiny random-weight
ModernBERT cross-encoder laid out as Alibaba-NLP/gte-reranker-modernbert-base
is (ModernBertForSequenceClassification, one label, classifier_pooling
"mean": the head is dense (no bias), GELU, LayerNorm, then the classifier
with its bias, over the mean of the last hidden states), and
tests/golden/modernbert_rerank_scores.json: for query-document pairs
([CLS] query [SEP] document [SEP]), the ids, the float64 logit, and the score
sentence-transformers' CrossEncoder gives with its default activation
(sigmoid for one label) in float32.

The backbone is make_modernbert_model.py's (the same config.json keys, sizes,
window and tokenizer), drawn again with another seed. Run as
family_models.py says.
"""
import os
import shutil

import numpy as np
import tokenizers
import torch
from sentence_transformers import CrossEncoder
from transformers import (AutoModelForSequenceClassification, AutoTokenizer,
                          ModernBertForSequenceClassification)

import family_models as fm
import make_modernbert_model as mb

OUT = fm.golden_dir("modernbert-rerank-tiny")
GOLDEN = fm.golden_dir("modernbert_rerank_scores.json")


def pairs():
    par = fm.make_family_tokenizers.corpus()
    return [
        ("What is the capital of Bulgaria?", "Sofia is the capital and largest city."),
        ("What is the capital of Bulgaria?", par[4]),
        ("how do rerankers work", par[2]),
        ("The", "The"),
        ("embeddings and rerankers", " ".join(par[:10])),
        ("检索系统", par[11]),
        ("Xitsonga", par[8]),
    ]


def spread(name, p):
    if name == "classifier.bias":
        return 0.5 * torch.randn_like(p)
    return mb.spread(name, p)


def config_json(tok):
    return dict(mb.config_json(tok), architectures=["ModernBertForSequenceClassification"],
                classifier_pooling="mean", id2label={"0": "LABEL_0"}, label2id={"LABEL_0": 0})


def main():
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    tok = mb.tokenizer()
    want = config_json(tok)
    model = fm.random_checkpoint(OUT, ModernBertForSequenceClassification, want, tok, 20261209,
                                 spread)
    assert model.config.num_labels == 1 and model.config.classifier_pooling == "mean"
    fm.remove_files(OUT, ("special_tokens_map.json", "README.md"))
    fm.copy_tokenizer(OUT, mb.FAMILY)
    fm.write_json(os.path.join(OUT, "config.json"), want)
    fm.write_json(os.path.join(OUT, "tokenizer_config.json"), mb.tokenizer_config())

    ref = AutoModelForSequenceClassification.from_pretrained(
        OUT, dtype=torch.float64, attn_implementation="sdpa").eval()
    assert type(ref).__name__ == "ModernBertForSequenceClassification"
    tok = AutoTokenizer.from_pretrained(OUT)
    plain = tokenizers.Tokenizer.from_file(fm.tokenizer_file(mb.FAMILY))
    cases = []
    with fm.exact_float64(ref), torch.no_grad():
        for a, b in pairs():
            enc = tok(a, b, return_tensors="pt")
            ids = enc["input_ids"][0].tolist()
            assert ids == plain.encode(a, b).ids, (a, b)
            logit = ref(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"]).logits
            cases.append({"text": a, "text_pair": b, "ids": ids, "logit": float(logit[0, 0])})
    ce = CrossEncoder(OUT, device="cpu", max_length=fm.MAX_TOKENS,
                      model_kwargs={"dtype": torch.float32})
    raw = ce.predict([(c["text"], c["text_pair"]) for c in cases],
                     activation_fn=torch.nn.Identity(), convert_to_numpy=True, batch_size=1)
    logits = np.array([c["logit"] for c in cases])
    err = float(np.abs(raw.reshape(-1) - logits).max())
    assert err < 1e-5, (raw, logits)
    scores = ce.predict([(c["text"], c["text_pair"]) for c in cases], convert_to_numpy=True,
                        batch_size=1)
    for c, s in zip(cases, scores.reshape(-1)):
        c["cross_encoder_score"] = float(s)
    assert np.allclose(scores.reshape(-1), 1 / (1 + np.exp(-logits)), atol=1e-5)
    assert np.ptp(logits) > 1.0, logits
    with fm.exact_float64(ref), torch.no_grad():
        ref.config.local_attention = 4 * fm.MAX_TOKENS
        wide = [float(ref(**tok(c["text"], c["text_pair"], return_tensors="pt")).logits[0, 0])
                for c in cases]
        ref.config.local_attention = mb.LOCAL_ATTENTION
    fm.write_golden(GOLDEN, {
        "masking": "as tests/golden/modernbert_embeddings.json's: local layers see "
                   "|i - j| <= local_attention // 2, global layers every key",
        "cross_encoder": "sentence-transformers CrossEncoder, float32, its default activation "
                         "(sigmoid); its logits lie within %.2g of the float64 ones" % err,
        "sensitivity": {"window_made_global_max_logit_change":
                        float(np.abs(np.array(wide) - logits).max())},
    }, {"cases": cases}, OUT)


if __name__ == "__main__":
    main()
