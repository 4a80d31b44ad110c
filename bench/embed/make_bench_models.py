#!/usr/bin/env python3
"""make_bench_models.py — the random-weight models make bench-embed times
beside all-MiniLM-L6-v2, made once and cached (the Hugging Face Hub is not
needed, and the real checkpoints' weights would not change a timing):

  xlmr-base-random  an embedder shaped as XLM-RoBERTa base (12 layers,
                    hidden 768, 12 heads, FFN 3072, 514 position rows),
                    saved by sentence-transformers with mean pooling and
                    Normalize, the modules of multilingual-e5-base
                    (paraphrase-multilingual-mpnet-base-v2 is the same
                    encoder shape with mean pooling). Its tokenizer is
                    the repo's real SentencePiece Unigram model of
                    tests/golden/xlmr-tiny (429 pieces), so the embedding
                    matrix is 429 rows, not XLM-R's 250,002: a forward costs
                    the same (the embedding is one row gathered per token,
                    whatever the table's size), only the file is smaller.
  ce-minilm-random  a cross-encoder shaped as
                    cross-encoder/ms-marco-MiniLM-L-6-v2
                    (BertForSequenceClassification, 6 layers, hidden 384,
                    12 heads, FFN 1536, one label) with the all-MiniLM-L6-v2
                    WordPiece tokenizer, saved as sentence-transformers'
                    CrossEncoder saves it.
  modernbert-base-random
                    an embedder shaped as answerdotai/ModernBERT-base
                    (ModernBertModel: 22 layers, hidden 768, 12 heads,
                    GeGLU intermediate 1152 so Wi is 768 -> 2304, every
                    third layer global with RoPE theta 160000, the others
                    local with a 128-token window and theta 10000, 8192
                    positions, no biases), laid out as
                    nomic-ai/modernbert-embed-base is (mean Pooling,
                    Normalize, sentence_bert_config max_seq_length 8192).
  qwen3-0.6b-random an embedder shaped as Qwen/Qwen3-Embedding-0.6B
                    (Qwen3Model: 28 layers, hidden 1024, 16 query heads and
                    8 KV heads of head_dim 128, SwiGLU intermediate 3072,
                    RoPE theta 1e6, 32768 positions, tied embeddings, causal
                    attention), laid out as the published one is (last-token
                    Pooling, Normalize, its query prompt,
                    sentence_bert_config max_seq_length 8192).
                    Both take the config.json and tokenizer_config.json keys,
                    the directory layout and the vocabulary
                    (tests/golden/fam-modernbert, fam-qwen3) of the tiny
                    golden models (tests/golden/make_modernbert_model.py,
                    make_qwen3_model.py), with the published checkpoints'
                    sizes written over the tiny ones. The sizes are those of
                    the published config.json files as known to the author,
                    not read from the Hub. The weights are stored in float32
                    (config torch_dtype float32), so that every peer runs
                    them in float32 as it does the others.

The weights are random but, as tests/golden/make_task_models.py draws them,
with a spread large enough that the outputs are not degenerate: each weight
matrix N(0, 1.4 / sqrt(fan-in)) (about the 0.05 of trained base-size
encoders, so attention is neither uniform nor one-hot), biases N(0, 0.1),
LayerNorm gains 1 + N(0, 0.2), embedding tables N(0, 0.5); ModernBERT's
LayerNorm and Qwen3's RMSNorm gains (q_norm and k_norm included) the same as
LayerNorm's. The script checks that distinct texts get distinct outputs
before it saves anything.

Each model lives in OUT/NAME with a stamp: the hash of this script and of
the tokenizer files it was made from (the repo's xlmr-tiny tokenizer, or
MiniLM's, or the family tokenizer and the golden scripts it takes its layout
from); a model whose stamp matches is kept, so a second run costs
nothing, and a changed tokenizer makes it again.

Usage (an environment with torch, transformers and sentence-transformers:
the bench's venv, made by `python3 bench/embed/peers.py --inputs /dev/null
--setup-only`):
    PY bench/embed/make_bench_models.py [--out DIR] [--minilm models/all-MiniLM-L6-v2]
        [--models xlmr-base-random,ce-minilm-random,modernbert-base-random,qwen3-0.6b-random]
Prints each model's directory, one a line, in the order asked.
"""
import argparse
import hashlib
import math
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GOLDEN = os.path.join(ROOT, "tests", "golden")
XLMR_TOKENIZER = os.path.join(GOLDEN, "xlmr-tiny", "tokenizer.json")
STAMP = ".made-by"
ALL = "xlmr-base-random,ce-minilm-random,modernbert-base-random,qwen3-0.6b-random"
# What the family models are made from: the golden scripts whose layout
# they take, and the family tokenizers.
FAMILY_INPUTS = {
    "modernbert": [os.path.join(GOLDEN, n) for n in (
        "make_modernbert_model.py", "family_models.py", "fam-modernbert/tokenizer.json")],
    "qwen3": [os.path.join(GOLDEN, n) for n in (
        "make_qwen3_model.py", "family_models.py", "fam-qwen3/tokenizer.json")],
}
# The published sentence_bert_config.json max_seq_length of
# nomic-ai/modernbert-embed-base and Qwen/Qwen3-Embedding-0.6B.
FAMILY_MAX_SEQ = 8192

TEXTS = [
    "the city of water and light",
    "a report on energy policy and health",
    "students and teachers at the university",
    "music film album season team game",
    "what is the price of the market order",
]


def default_out():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "attnserve", "bench-embed", "models")


# The files of the MiniLM checkpoint the cross-encoder's tokenizer is read
# from (those that exist count; a missing one counts as absent).
MINILM_TOKENIZER_FILES = ("tokenizer.json", "vocab.txt", "tokenizer_config.json",
                          "special_tokens_map.json", "added_tokens.json")


def stamp(inputs):
    """This script's hash and that of each input file, by name."""
    h = hashlib.sha256()
    for path in [os.path.abspath(__file__)] + list(inputs):
        h.update(os.path.basename(path).encode() + b"\0")
        if os.path.exists(path):
            with open(path, "rb") as f:
                h.update(hashlib.sha256(f.read()).digest())
        else:
            h.update(b"absent")
    return h.hexdigest()[:16]


def randomise(model, seed):
    import torch

    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
            elif "embeddings" in name:
                p.normal_(0.0, 0.5)
            elif p.dim() == 2:
                p.normal_(0.0, 1.4 / math.sqrt(p.shape[1]))
            else:
                p.normal_(0.0, 0.1)
    model.eval()


def check_distinct(st, out):
    """Distinct texts must get distinct, finite embeddings."""
    import numpy as np

    emb = np.asarray(st.encode(TEXTS, convert_to_numpy=True), dtype=np.float64)
    cos = emb @ emb.T
    off = cos[~np.eye(len(TEXTS), dtype=bool)]
    assert np.isfinite(emb).all() and off.max() < 0.99, off
    print(f"{out}: cosine of distinct texts {off.min():.3f}..{off.max():.3f}", file=sys.stderr)


def family_spread(name, p):
    """The module docstring's spreads, by the family models' parameter
    names (ModernBERT: tok_embeddings, *norm; Qwen3: embed_tokens,
    *layernorm, q_norm, k_norm, norm)."""
    import torch

    if p.dim() == 1 and "norm" in name:
        return 1.0 + 0.2 * torch.randn_like(p)
    if "tok_embeddings" in name or "embed_tokens" in name:
        return 0.5 * torch.randn_like(p)
    if p.dim() == 2:
        return (1.4 / math.sqrt(p.shape[1])) * torch.randn_like(p)
    return 0.1 * torch.randn_like(p)


def make_family(out, family, sizes, pooling, seed):
    """A full-size family embedder: the golden script's config.json with
    sizes written over it, random weights in float32, saved in the golden
    models' published layout (family_models.make_dir) with
    sentence_bert_config.json's max_seq_length FAMILY_MAX_SEQ."""
    import torch
    import transformers
    from sentence_transformers import SentenceTransformer, models

    sys.path.insert(0, GOLDEN)
    import family_models as fm
    gold = __import__("make_%s_model" % family)

    tok = gold.tokenizer()
    tok.model_max_length = FAMILY_MAX_SEQ
    cfg = dict(gold.config_json(tok), **sizes, torch_dtype="float32")
    tok_cfg = dict(gold.tokenizer_config(), model_max_length=FAMILY_MAX_SEQ)
    cls = {"modernbert": transformers.ModernBertModel, "qwen3": transformers.Qwen3Model}[family]

    def build(tmp):
        fm.write_json(os.path.join(tmp, "config.json"), cfg)
        model = cls(cls.config_class.from_pretrained(tmp))
        fm.randomise(model, seed, family_spread)
        model.to(torch.float32).save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        transformer = models.Transformer(tmp, max_seq_length=FAMILY_MAX_SEQ)
        dim = transformer.get_word_embedding_dimension()
        return SentenceTransformer(
            modules=[transformer, models.Pooling(dim, pooling), models.Normalize()],
            device="cpu", similarity_fn_name="cosine")

    fm.make_dir(build, out, family, cfg["hidden_size"],
                {"mean": "mean_tokens", "lasttoken": "lasttoken"}[pooling], cfg, tok_cfg,
                prompts=getattr(gold, "PROMPTS", None))
    # make_dir writes the golden models' 512; the published ones say 8192.
    fm.write_json(os.path.join(out, "sentence_bert_config.json"),
                  {"max_seq_length": FAMILY_MAX_SEQ, "do_lower_case": False})
    st = SentenceTransformer(out, device="cpu")
    m = st[0].auto_model
    assert type(m) is cls and m.dtype == torch.float32, (type(m), m.dtype)
    assert st.max_seq_length == FAMILY_MAX_SEQ, st.max_seq_length
    assert m.config.num_hidden_layers == sizes["num_hidden_layers"]
    check_distinct(st, out)


def make_modernbert(out):
    """answerdotai/ModernBERT-base's sizes (the golden's config.json keys
    otherwise: no biases, global_attn_every_n_layers 3, the two thetas)."""
    make_family(out, "modernbert", {
        "hidden_size": 768, "num_hidden_layers": 22, "num_attention_heads": 12,
        "intermediate_size": 1152, "local_attention": 128, "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0, "global_attn_every_n_layers": 3,
        "max_position_embeddings": 8192}, "mean", 20261303)


def make_qwen3(out):
    """Qwen/Qwen3-Embedding-0.6B's sizes (tied embeddings, no biases, no
    sliding window, as the golden's config.json)."""
    make_family(out, "qwen3", {
        "hidden_size": 1024, "num_hidden_layers": 28, "num_attention_heads": 16,
        "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 3072,
        "rope_theta": 1000000, "max_position_embeddings": 32768, "max_window_layers": 28,
        "tie_word_embeddings": True}, "lasttoken", 20261304)


def make_xlmr(out):
    from sentence_transformers import SentenceTransformer, models
    from transformers import XLMRobertaConfig, XLMRobertaModel, XLMRobertaTokenizerFast

    tok = XLMRobertaTokenizerFast(tokenizer_file=XLMR_TOKENIZER)
    assert tok.pad_token_id == 1 and tok.bos_token_id == 0 and tok.eos_token_id == 2
    tok.model_max_length = 512
    cfg = XLMRobertaConfig(
        vocab_size=len(tok), hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, hidden_act="gelu", max_position_embeddings=514,
        type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    model = XLMRobertaModel(cfg, add_pooling_layer=False)
    randomise(model, 20261301)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        transformer = models.Transformer(tmp, max_seq_length=512)
        dim = transformer.get_word_embedding_dimension()
        st = SentenceTransformer(
            modules=[transformer, models.Pooling(dim, "mean"), models.Normalize()], device="cpu")
        st.save(out)
    check_distinct(SentenceTransformer(out, device="cpu"), out)


def make_cross_encoder(out, minilm):
    import numpy as np
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(minilm)
    tok.model_max_length = 512
    cfg = BertConfig(
        vocab_size=len(tok), hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
        intermediate_size=1536, hidden_act="gelu", max_position_embeddings=512,
        type_vocab_size=2, layer_norm_eps=1e-12, pad_token_id=0, num_labels=1,
        architectures=["BertForSequenceClassification"])
    model = BertForSequenceClassification(cfg)
    randomise(model, 20261302)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        CrossEncoder(tmp, max_length=512, device="cpu").save_pretrained(out)
    ce = CrossEncoder(out, device="cpu")
    pairs = [(TEXTS[0], t) for t in TEXTS]
    s = ce.predict(pairs, activation_fn=torch.nn.Identity(), convert_to_numpy=True).reshape(-1)
    assert np.isfinite(s).all() and s.std() > 0.05, s
    print(f"{out}: logits of {len(pairs)} pairs {s.min():.3f}..{s.max():.3f}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", default=default_out())
    p.add_argument("--minilm", default=os.path.join(ROOT, "models", "all-MiniLM-L6-v2"))
    p.add_argument("--models", default=ALL)
    a = p.parse_args()
    makers = {"xlmr-base-random": make_xlmr,
              "ce-minilm-random": lambda out: make_cross_encoder(out, a.minilm),
              "modernbert-base-random": make_modernbert,
              "qwen3-0.6b-random": make_qwen3}
    inputs = {"xlmr-base-random": [XLMR_TOKENIZER],
              "ce-minilm-random": [os.path.join(a.minilm, f) for f in MINILM_TOKENIZER_FILES],
              "modernbert-base-random": FAMILY_INPUTS["modernbert"],
              "qwen3-0.6b-random": FAMILY_INPUTS["qwen3"]}
    for name in a.models.split(","):
        want = stamp(inputs[name])
        out = os.path.join(a.out, name)
        path = os.path.join(out, STAMP)
        if not (os.path.exists(path) and open(path).read().strip() == want):
            print(f"make_bench_models: making {out}", file=sys.stderr)
            tmp = out + ".tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            makers[name](tmp)
            for extra in ("README.md", "sentencepiece.bpe.model"):
                if os.path.exists(os.path.join(tmp, extra)):
                    os.remove(os.path.join(tmp, extra))
            with open(os.path.join(tmp, STAMP), "w") as f:
                f.write(want + "\n")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
