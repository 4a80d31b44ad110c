#!/usr/bin/env python3
"""Makes tests/golden/qwen3-tiny-model/, a tiny random-weight Qwen3 embedder
saved as a sentence-transformers directory laid out as
Qwen/Qwen3-Embedding-0.6B is (Qwen3 weights without a "model." prefix or an
lm_head; Transformer, Pooling with pooling_mode_lasttoken, Normalize; the
published query prompt), and tests/golden/qwen3_embeddings.json: the ids and
the float64 vectors sentence-transformers computes with it, without a prompt
("lasttoken_normalized"; the "document" prompt is empty) and with the
"query" prompt ("query_lasttoken_normalized").

2 layers, hidden 64, 4 query heads and 2 KV heads (query head h reads KV
head h // 2) of head_dim 32, so the attention width 128 differs from hidden
as the published 16 x 128 differs from 1024; per-head RMSNorm on Q and K
(q_norm, k_norm) before RoPE (theta 1e6), SwiGLU intermediate 128, RMSNorm
eps 1e-6, causal attention, tied embeddings, no biases. The vocabulary is
tests/golden/fam-qwen3 (make_family_tokenizers.py), which appends
<|endoftext|>: the last token, whose vector the pooling takes.

The golden's "sensitivity" holds the lowest cosine, over the inputs, between
the golden and the same model with one feature changed (attention made
bidirectional, RoPE theta 1e4, every RMSNorm weight set to 1, KV heads
assigned h % 2 in place of h // 2): each far below any test floor. Run as
family_models.py says.
"""
import torch
from transformers import Qwen3Model

import family_models as fm

OUT = fm.golden_dir("qwen3-tiny-model")
GOLDEN = fm.golden_dir("qwen3_embeddings.json")
FAMILY = "qwen3"
HEADS, KV_HEADS, HEAD_DIM = 4, 2, 32
# Qwen/Qwen3-Embedding-0.6B's config_sentence_transformers.json prompts.
PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages that "
                    "answer the query\nQuery:",
           "document": ""}


def spread(name, p):
    if "q_norm" in name or "k_norm" in name:
        # Scores of several units: attention far from uniform.
        return 1.5 + 0.5 * torch.randn_like(p)
    return fm.family_spread(name, p, "embed_tokens")


def tokenizer():
    return fm.fast_tokenizer(FAMILY, eos_token="<|im_end|>", pad_token="<|endoftext|>")


def config_json(tok):
    """Qwen/Qwen3-Embedding-0.6B's config.json keys, tiny values."""
    eot = tok.convert_tokens_to_ids("<|endoftext|>")
    return {
        "architectures": ["Qwen3ForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": eot,
        "eos_token_id": eot,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "hidden_size": 64,
        "initializer_range": 0.02,
        "intermediate_size": 128,
        "max_position_embeddings": fm.MAX_TOKENS,
        "max_window_layers": 2,
        "model_type": "qwen3",
        "num_attention_heads": HEADS,
        "num_hidden_layers": 2,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": 1e-06,
        "rope_scaling": None,
        "rope_theta": 1000000,
        "sliding_window": None,
        "tie_word_embeddings": True,
        "torch_dtype": "float16",
        "use_cache": True,
        "use_sliding_window": False,
        "vocab_size": fm.padded_vocab(tok),
    }


def tokenizer_config():
    """Qwen/Qwen3-Embedding-0.6B's tokenizer_config.json, less the
    added_tokens_decoder and chat template (tokenizer.json has the tokens)."""
    return {"add_bos_token": False, "add_prefix_space": False, "bos_token": None,
            "clean_up_tokenization_spaces": False, "eos_token": "<|im_end|>",
            "errors": "replace", "model_max_length": fm.MAX_TOKENS,
            "pad_token": "<|endoftext|>", "padding_side": "left",
            "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer",
            "unk_token": None}


def build(tmp):
    tok = tokenizer()
    fm.random_checkpoint(tmp, Qwen3Model, config_json(tok), tok, 20261206, spread)
    return fm.sentence_model(tmp, "lasttoken", prompts=PROMPTS)


def check_config(st):
    model = st[0].auto_model
    cfg = model.config
    assert type(model).__name__ == "Qwen3Model", type(model)
    assert cfg.layer_types == ["full_attention"] * 2, cfg.layer_types
    assert cfg.rope_parameters["rope_theta"] == 1e6 and cfg.head_dim == HEAD_DIM
    assert model.layers[0].self_attn.q_proj.weight.shape == (HEADS * HEAD_DIM, 64)
    assert model.embed_tokens.weight.dtype == torch.float64


def interleave_kv(st):
    """Makes the model compute what one that gives query head h the KV head
    h % KV_HEADS (in place of h // (HEADS / KV_HEADS)) computes: query heads
    1 and 2 swap their rows of q_proj and their columns of o_proj."""
    perm = [0, 2, 1, 3]
    for layer in st[0].auto_model.layers:
        a = layer.self_attn
        q = a.q_proj.weight.data.view(HEADS, HEAD_DIM, -1)
        a.q_proj.weight.data = q[perm].reshape(HEADS * HEAD_DIM, -1).contiguous()
        o = a.o_proj.weight.data.view(-1, HEADS, HEAD_DIM)
        a.o_proj.weight.data = o[:, perm].reshape(-1, HEADS * HEAD_DIM).contiguous()


def bidirectional(st):
    st[0].auto_model.config.is_causal = False
    for layer in st[0].auto_model.layers:
        layer.self_attn.is_causal = False


def theta_1e4(st):
    st[0].auto_model.config.rope_parameters["rope_theta"] = 1e4


def masking(st):
    fm.check_masks(st, 40, {"full_attention": lambda d: d >= 0})
    return {"layers": "causal: query i sees key j when j <= i (padding keys never); no "
                      "sliding window (use_sliding_window false)",
            "read_from": "transformers.masking_utils.causal_mask_function (kv_idx <= q_idx), "
                         "checked on the mask each layer is handed in a forward"}


def main():
    text_list = fm.texts()
    fm.make_dir(build, OUT, FAMILY, 64, "lasttoken", config_json(tokenizer()),
                tokenizer_config(), prompts=PROMPTS)
    st = fm.load(OUT)
    fm.check_modules(st, ["Transformer", "Pooling", "Normalize"], PROMPTS)
    check_config(st)
    sets, vectors = fm.reference_sets(st, FAMILY, text_list, {
        "lasttoken_normalized": None, "query_lasttoken_normalized": "query"})
    eot = st.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    assert all(c["ids"][-1] == eot for s in sets.values() for c in s)
    plain = vectors["lasttoken_normalized"]
    with fm.exact_float64(st):
        assert fm.max_abs(fm.embed(st, text_list, "document"), plain) == 0.0
    fm.write_embedding_golden(GOLDEN, OUT, text_list, sets, plain, masking(st), {
        "attention_made_bidirectional": bidirectional, "rope_theta_1e4": theta_1e4,
        "rms_norm_weights_one": fm.norm_weights_set(1.0), "kv_heads_interleaved": interleave_kv},
        PROMPTS)


if __name__ == "__main__":
    main()
