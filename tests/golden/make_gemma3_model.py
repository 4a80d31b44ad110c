#!/usr/bin/env python3
"""Makes tests/golden/gemma3-tiny-model/, a tiny random-weight EmbeddingGemma
saved as a sentence-transformers directory laid out as
google/embeddinggemma-300m is (Gemma3TextModel with bidirectional attention;
Transformer, mean Pooling, Dense 64 -> 256 and Dense 256 -> 64 without bias
or activation, Normalize; the published prompts), and
tests/golden/gemma3_embeddings.json: the ids and the float64 vectors
sentence-transformers computes with it without a prompt
("mean_normalized"), with the "query" prompt ("query_mean_normalized") and
with the "document" prompt ("document_mean_normalized").

4 layers, hidden 64, 2 query heads and 1 KV head of head_dim 32,
query_pre_attn_scalar 32 (the published one is its head_dim, 256), layer
types sliding, sliding, full, sliding (the published model repeats 5
sliding then 1 full; the explicit list is what transformers reads, and a
sliding layer after the full one is exercised), sliding_window 16, RoPE
theta 1e6 on full layers and 10000 on sliding ones, GeGLU (tanh GELU)
intermediate 96, the four Gemma RMSNorms per layer plus q_norm and k_norm,
all scaling by (1 + weight), the embedding scaled by sqrt(hidden) = 8, eps
1e-6. The vocabulary is tests/golden/fam-gemma3 (make_family_tokenizers.py):
<bos> $A <eos>.

The golden's "masking" says which keys a query sees in each layer type, as
the mask transformers hands each layer in a forward shows it; "sensitivity"
the lowest cosine, over the inputs, between the golden and the same model
with one feature changed (the window made global, attention made causal,
the RoPE thetas swapped, every norm weight 0 so the norms scale by 1, the
sqrt(hidden) embedding scale left out): each far below any test floor. Run
as family_models.py says.
"""
import torch
from sentence_transformers import models
from transformers import Gemma3TextModel

import family_models as fm

OUT = fm.golden_dir("gemma3-tiny-model")
GOLDEN = fm.golden_dir("gemma3_embeddings.json")
FAMILY = "gemma3"
SLIDING_WINDOW = 16
LAYER_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention"]
DENSE = 256
# google/embeddinggemma-300m's config_sentence_transformers.json prompts.
PROMPTS = {
    "query": "task: search result | query: ",
    "document": "title: none | text: ",
    "BitextMining": "task: search result | query: ",
    "Clustering": "task: clustering | query: ",
    "Classification": "task: classification | query: ",
    "InstructionRetrieval": "task: code retrieval | query: ",
    "MultilabelClassification": "task: classification | query: ",
    "PairClassification": "task: sentence similarity | query: ",
    "Reranking": "task: search result | query: ",
    "Retrieval": "task: search result | query: ",
    "Retrieval-query": "task: search result | query: ",
    "Retrieval-document": "title: none | text: ",
    "STS": "task: sentence similarity | query: ",
    "Summarization": "task: summarization | query: ",
}


def spread(name, p):
    if "q_norm" in name or "k_norm" in name:
        # Gemma norms scale by 1 + weight: about 2, scores of several units.
        return 1.0 + 0.4 * torch.randn_like(p)
    if "norm" in name:
        return 0.3 * torch.randn_like(p)
    if "embed_tokens" in name:
        return 0.3 * torch.randn_like(p)
    return 0.2 * torch.randn_like(p)


def tokenizer():
    return fm.fast_tokenizer(FAMILY, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                             unk_token="<unk>", mask_token="<mask>")


def config_json(tok):
    """google/embeddinggemma-300m's config.json keys, tiny values."""
    return {
        "_sliding_window_pattern": 3,
        "architectures": ["Gemma3TextModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "attn_logit_softcapping": None,
        "bos_token_id": tok.convert_tokens_to_ids("<bos>"),
        "dtype": "float16",
        "eos_token_id": tok.convert_tokens_to_ids("<eos>"),
        "final_logit_softcapping": None,
        "head_dim": 32,
        "hidden_activation": "gelu_pytorch_tanh",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 96,
        "layer_types": LAYER_TYPES,
        "max_position_embeddings": fm.MAX_TOKENS,
        "model_type": "gemma3_text",
        "num_attention_heads": 2,
        "num_hidden_layers": len(LAYER_TYPES),
        "num_key_value_heads": 1,
        "pad_token_id": tok.convert_tokens_to_ids("<pad>"),
        "query_pre_attn_scalar": 32,
        "rms_norm_eps": 1e-06,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": None,
        "rope_theta": 1000000.0,
        "sliding_window": SLIDING_WINDOW,
        "use_bidirectional_attention": True,
        "use_cache": True,
        "vocab_size": fm.padded_vocab(tok),
    }


def tokenizer_config():
    """google/embeddinggemma-300m's tokenizer_config.json, less the
    added_tokens_decoder (tokenizer.json has the tokens)."""
    return {"add_bos_token": True, "add_eos_token": True, "bos_token": "<bos>",
            "clean_up_tokenization_spaces": False, "eos_token": "<eos>", "mask_token": "<mask>",
            "model_max_length": fm.MAX_TOKENS, "pad_token": "<pad>", "padding_side": "right",
            "sp_model_kwargs": {}, "spaces_between_special_tokens": False,
            "tokenizer_class": "GemmaTokenizer", "unk_token": "<unk>",
            "use_default_system_prompt": False}


def build(tmp):
    tok = tokenizer()
    fm.random_checkpoint(tmp, Gemma3TextModel, config_json(tok), tok, 20261207, spread)
    dense = [models.Dense(64, DENSE, bias=False, activation_function=torch.nn.Identity()),
             models.Dense(DENSE, 64, bias=False, activation_function=torch.nn.Identity())]
    torch.manual_seed(20261208)
    with torch.no_grad():
        for d in dense:
            w = d.linear.weight
            w.copy_(torch.randn_like(w) / w.shape[1] ** 0.5)
            fm.to_float16(d)
    return fm.sentence_model(tmp, "mean", dense=dense, prompts=PROMPTS)


def check_config(st):
    model = st[0].auto_model
    cfg = model.config
    assert type(model).__name__ == "Gemma3TextModel", type(model)
    assert cfg.layer_types == LAYER_TYPES and cfg.use_bidirectional_attention
    assert cfg.rope_parameters["full_attention"]["rope_theta"] == 1e6
    assert cfg.rope_parameters["sliding_attention"]["rope_theta"] == 1e4
    # Bidirectional Gemma3 keeps sliding_window // 2 + 1 (an exclusive
    # half-width) and writes (that - 1) * 2 back.
    assert cfg.sliding_window == SLIDING_WINDOW // 2 + 1, cfg.sliding_window
    assert cfg.to_dict()["sliding_window"] == SLIDING_WINDOW
    assert model.embed_tokens.embed_scale.item() == 8.0
    assert all(not layer.self_attn.is_causal for layer in model.layers)


def masking(st):
    half = SLIDING_WINDOW // 2
    fm.check_masks(st, 40, {"full_attention": lambda d: d == d,
                            "sliding_attention": lambda d: d.abs() <= half})
    return {"sliding_layers": "|i - j| <= sliding_window // 2 (= %d here: both sides, the "
                              "token itself included; padding keys never), i.e. "
                              "|i - j| < sliding_window // 2 + 1" % half,
            "full_layers": "every non-padding key (bidirectional)",
            "read_from": "Gemma3TextConfig keeps sliding_window // 2 + 1 when "
                         "use_bidirectional_attention; Gemma3TextModel builds the sliding "
                         "layers' mask as create_sliding_window_causal_mask (causal and "
                         "kv_idx > q_idx - that) OR _bidirectional_window_overlay "
                         "(abs(q_idx - kv_idx) < that); checked on the mask each layer is "
                         "handed in a forward"}


def window_global(st):
    st[0].auto_model.config.sliding_window = 4 * fm.MAX_TOKENS


def causal(st):
    st[0].auto_model.config.use_bidirectional_attention = False
    for layer in st[0].auto_model.layers:
        layer.self_attn.is_causal = True


def thetas_swapped(st):
    rp = st[0].auto_model.config.rope_parameters
    rp["full_attention"]["rope_theta"], rp["sliding_attention"]["rope_theta"] = 1e4, 1e6


def no_embed_scale(st):
    st[0].auto_model.embed_tokens.embed_scale.fill_(1.0)


def main():
    text_list = fm.texts()
    fm.make_dir(build, OUT, FAMILY, 64, "mean_tokens", config_json(tokenizer()),
                tokenizer_config(), denses=2, prompts=PROMPTS)
    st = fm.load(OUT)
    fm.check_modules(st, ["Transformer", "Pooling", "Dense", "Dense", "Normalize"], PROMPTS)
    check_config(st)
    sets, vectors = fm.reference_sets(st, FAMILY, text_list, {
        "mean_normalized": None, "query_mean_normalized": "query",
        "document_mean_normalized": "document"})
    plain = vectors["mean_normalized"]
    fm.write_embedding_golden(GOLDEN, OUT, text_list, sets, plain, masking(st), {
        "window_made_global": window_global, "attention_made_causal": causal,
        "rope_thetas_swapped": thetas_swapped, "norm_weights_zero": fm.norm_weights_set(0.0),
        "embed_scale_left_out": no_embed_scale}, PROMPTS)


if __name__ == "__main__":
    main()
