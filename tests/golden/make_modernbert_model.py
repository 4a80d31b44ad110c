#!/usr/bin/env python3
"""Makes tests/golden/modernbert-tiny-model/, a tiny random-weight ModernBERT
embedder saved as a sentence-transformers directory laid out as
nomic-ai/modernbert-embed-base is (ModernBertModel; Transformer, mean
Pooling, Normalize), and tests/golden/modernbert_embeddings.json: the ids
and the float64 vectors sentence-transformers computes with it
("mean_normalized"), and the same model's vectors with CLS pooling
("cls_normalized", as Alibaba-NLP/gte-modernbert-base pools), so a test can
serve both by editing 1_Pooling/config.json.

4 layers, hidden 64, 4 heads of 16, GeGLU intermediate 96 (Wi is 64 -> 192),
no biases, LayerNorm eps 1e-5; global_attn_every_n_layers 3 makes layers 0
and 3 global (RoPE theta 160000) and 1 and 2 local (theta 10000) with
local_attention 16: a token sees the keys within 8 positions (the predicate
is in the golden's "masking"). The vocabulary is tests/golden/fam-modernbert
(make_family_tokenizers.py), the embedding table padded to a multiple of 64
rows as the published 50368 is. config.json carries the published keys
(global_rope_theta, local_rope_theta, global_attn_every_n_layers), not the
layer_types and rope_parameters transformers 5 writes; reading it back gives
the same model (checked).

The golden's "sensitivity" holds the lowest cosine, over the inputs, between
the golden and the same model with one feature changed (the window made
global, the two RoPE thetas swapped, the norms' weights set to 1): each far
below any test floor, so a test cannot pass with that feature wrong. Run as
family_models.py says.
"""
from sentence_transformers import SentenceTransformer, models
from transformers import ModernBertModel

import family_models as fm

OUT = fm.golden_dir("modernbert-tiny-model")
GOLDEN = fm.golden_dir("modernbert_embeddings.json")
FAMILY = "modernbert"
LOCAL_ATTENTION = 16
LAYERS = 4


def spread(name, p):
    # Wqkv, attention Wo, Wi and mlp Wo take the 0.2 spread: both the window
    # and the rotation steer attention.
    return fm.family_spread(name, p, "tok_embeddings")


def tokenizer():
    return fm.fast_tokenizer(FAMILY, cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
                             mask_token="[MASK]", unk_token="[UNK]")


def config_json(tok):
    """nomic-ai/modernbert-embed-base's config.json keys, tiny values."""
    cls, sep, pad = (tok.convert_tokens_to_ids(t) for t in ("[CLS]", "[SEP]", "[PAD]"))
    return {
        "architectures": ["ModernBertModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": cls,
        "classifier_activation": "gelu",
        "classifier_bias": False,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean",
        "cls_token_id": cls,
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": sep,
        "global_attn_every_n_layers": 3,
        "global_rope_theta": 160000.0,
        "gradient_checkpointing": False,
        "hidden_activation": "gelu",
        "hidden_size": 64,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_norm_eps": 1e-05,
        "local_attention": LOCAL_ATTENTION,
        "local_rope_theta": 10000.0,
        "max_position_embeddings": fm.MAX_TOKENS,
        "mlp_bias": False,
        "mlp_dropout": 0.0,
        "model_type": "modernbert",
        "norm_bias": False,
        "norm_eps": 1e-05,
        "num_attention_heads": 4,
        "num_hidden_layers": LAYERS,
        "pad_token_id": pad,
        "position_embedding_type": "absolute",
        "sep_token_id": sep,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
        "vocab_size": fm.padded_vocab(tok),
    }


def tokenizer_config():
    """The published tokenizer_config.json, less the added_tokens_decoder
    (tokenizer.json has the tokens)."""
    return {"clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "mask_token": "[MASK]",
            "model_input_names": ["input_ids", "attention_mask"],
            "model_max_length": fm.MAX_TOKENS, "pad_token": "[PAD]", "sep_token": "[SEP]",
            "tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]"}


def build(tmp):
    tok = tokenizer()
    fm.random_checkpoint(tmp, ModernBertModel, config_json(tok), tok, 20261205, spread)
    return fm.sentence_model(tmp, "mean", similarity_fn_name="cosine")


def check_config(st):
    cfg = st[0].auto_model.config
    assert cfg.layer_types == ["full_attention", "sliding_attention", "sliding_attention",
                               "full_attention"], cfg.layer_types
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 160000.0
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert cfg.sliding_window == LOCAL_ATTENTION // 2
    assert type(st[0].auto_model).__name__ == "ModernBertModel"


def masking(st):
    half = LOCAL_ATTENTION // 2
    fm.check_masks(st, 40, {"full_attention": lambda d: d == d,
                            "sliding_attention": lambda d: d.abs() <= half})
    return {"local_layers": "|i - j| <= local_attention // 2 (= %d here: both sides, the "
                            "token itself included; padding keys never)" % half,
            "global_layers": "every non-padding key",
            "read_from": "transformers.masking_utils.sliding_window_bidirectional_overlay "
                         "(abs(q_idx - kv_idx) <= config.sliding_window; "
                         "ModernBertConfig.sliding_window is local_attention // 2); checked "
                         "on the mask each layer is handed in a forward"}


def main():
    text_list = fm.texts()
    fm.make_dir(build, OUT, FAMILY, 64, "mean_tokens", config_json(tokenizer()),
                tokenizer_config())
    st = fm.load(OUT)
    fm.check_modules(st, ["Transformer", "Pooling", "Normalize"])
    check_config(st)
    sets, vectors = fm.reference_sets(st, FAMILY, text_list, {"mean_normalized": None})
    mean = vectors["mean_normalized"]
    with fm.exact_float64(st):
        cls_st = SentenceTransformer(modules=[st[0], models.Pooling(64, "cls"),
                                              models.Normalize()], device="cpu")
        sets["cls_normalized"] = fm.cases(text_list, [c["ids"] for c in sets["mean_normalized"]],
                                          fm.embed(cls_st, text_list))

    def window_global(st):
        st[0].auto_model.config.local_attention = 4 * fm.MAX_TOKENS

    def thetas_swapped(st):
        rp = st[0].auto_model.config.rope_parameters
        rp["full_attention"]["rope_theta"], rp["sliding_attention"]["rope_theta"] = 1e4, 1.6e5

    fm.write_embedding_golden(GOLDEN, OUT, text_list, sets, mean, masking(st), {
        "window_made_global": window_global, "rope_thetas_swapped": thetas_swapped,
        "norm_weights_one": fm.norm_weights_set(1.0)})


if __name__ == "__main__":
    main()
