"""What the makers of the tiny random-weight embedders share
(make_xlmr_model.py, make_roberta_model.py, make_mpnet_model.py): the
weights' spread, the sentence-transformers directory they are saved as
(Transformer, mean Pooling, Normalize), and the golden cases computed with
it. Needs torch, transformers and sentence-transformers, as they do."""
import os
import platform
import shutil

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models


def randomise(model):
    """Draws every tensor of model, biases and LayerNorms included, from
    torch's current seed, with a spread large enough that attention mixes
    tokens and every position row (and relative bucket) matters: a wrong
    position numbering or a skipped tensor moves the vectors far past the
    tests' floors. HF's initialisation is too tame for that."""
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


def save_mean_normalized(tmp, out, max_tokens, leftovers):
    """Saves the transformer and tokenizer in tmp as the sentence-transformers
    directory out (replacing it), less the files named in leftovers (the
    model card, the slow tokenizer's files)."""
    transformer = models.Transformer(tmp, max_seq_length=max_tokens)
    dim = transformer.get_word_embedding_dimension()
    st = SentenceTransformer(
        modules=[transformer, models.Pooling(dim, "mean"), models.Normalize()], device="cpu")
    shutil.rmtree(out, ignore_errors=True)
    st.save(out)
    for name in leftovers:
        if os.path.exists(os.path.join(out, name)):
            os.remove(os.path.join(out, name))


def load(out):
    """The directory out as sentence-transformers loads it, checked to be
    Transformer, Pooling, Normalize."""
    st = SentenceTransformer(out, device="cpu")
    assert [type(m).__name__ for m in st] == ["Transformer", "Pooling", "Normalize"]
    return st


def encode(st, texts):
    """One golden case a text: the text, its ids and its vector (unnormalised
    by encode: the Normalize module already made it a unit vector)."""
    features = st.tokenize(texts)
    ids = [[int(t) for t, m in zip(row, mask) if m]
           for row, mask in zip(features["input_ids"].tolist(),
                                features["attention_mask"].tolist())]
    emb = st.encode(texts, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    return [{"text": t, "ids": i,
             "embedding": [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float32)]}
            for t, i, v in zip(texts, ids, emb)]


def versions():
    """The versions a golden was made with, recorded in it."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def dir_size(out):
    """The bytes of every file under out."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(out) for n in ns)
