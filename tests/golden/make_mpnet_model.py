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

Run as family_models.py says.
"""
import os

import tokenizers
import torch
from tokenizers import AddedToken, BertWordPieceTokenizer
from tokenizers.processors import TemplateProcessing
from transformers import MPNetConfig, MPNetModel, MPNetTokenizerFast
from transformers.models.mpnet.modeling_mpnet import MPNetEncoder

import family_models as fm

OUT = fm.golden_dir("mpnet-tiny-model")
GOLDEN = fm.golden_dir("mpnet_embeddings.json")
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


def build(tmp, tok):
    """The random MPNetModel and tok, saved to tmp, as a
    SentenceTransformer."""
    cfg = MPNetConfig(vocab_size=len(tok), hidden_size=32, num_hidden_layers=2,
                      num_attention_heads=4, intermediate_size=64, hidden_act="gelu",
                      max_position_embeddings=POSITIONS + 2, layer_norm_eps=1e-5,
                      relative_attention_num_buckets=32, pad_token_id=1, bos_token_id=0,
                      eos_token_id=2)
    model = MPNetModel(cfg, add_pooling_layer=False)
    fm.randomise(model, 20261205, fm.encoder_spread)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    return fm.sentence_model(tmp, "mean", MAX_TOKENS)


def main():
    tok, inner = mpnet_tokenizer()
    fm.save_dir(lambda tmp: build(tmp, tok), OUT)
    fm.remove_files(OUT, ("README.md", "vocab.txt"))
    # transformers' MPNetTokenizerFast saves a RobertaProcessing; the
    # checkpoints on the Hub carry the TemplateProcessing `tokenizers` writes,
    # which is what the directory keeps (the same ids, checked below).
    inner.save(os.path.join(OUT, "tokenizer.json"))
    # sentence-transformers 6 keeps max_seq_length in tokenizer_config.json's
    # model_max_length; all-mpnet-base-v2 on the Hub (and the service) has it
    # in sentence_bert_config.json: written there too.
    fm.rewrite_json(os.path.join(OUT, "sentence_bert_config.json"),
                    lambda c: dict(c, max_seq_length=MAX_TOKENS))

    cases = fm.encode(fm.load_as_saved(OUT), TEXTS)
    lengths = [len(c["ids"]) for c in cases]
    plain = tokenizers.Tokenizer.from_file(os.path.join(OUT, "tokenizer.json"))
    for c in cases:
        want = plain.encode(c["text"]).ids
        if len(want) <= MAX_TOKENS:
            assert want == c["ids"], c["text"]
    assert max(lengths) == MAX_TOKENS and sum(n > 129 for n in lengths) >= 3, lengths
    rel = torch.arange(-RANGE, RANGE + 1)
    buckets = MPNetEncoder.relative_position_bucket(rel).tolist()
    # buckets[i] is the bucket of relative position (key - query) i - RANGE.
    fm.write_float32_golden(GOLDEN, OUT, MAX_TOKENS, {"mean_normalized": cases},
                            {"bucket_range": RANGE, "buckets": buckets})


if __name__ == "__main__":
    main()
