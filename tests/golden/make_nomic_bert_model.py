#!/usr/bin/env python3
"""Makes tests/golden/nomic-bert-tiny-model/, a tiny random-weight NomicBERT
embedder saved as a sentence-transformers directory laid out as
nomic-ai/nomic-embed-text-v1.5 is (Transformer, mean Pooling, Normalize;
the search_query/search_document prompts), and
tests/golden/nomic_bert_embeddings.json: the ids and the float64 vectors
sentence-transformers computes with it without a prompt ("mean_normalized")
and with the "query" prompt ("query_mean_normalized").

The published checkpoint predates transformers' NomicBertModel: its
safetensors keep the names of nomic's own code (emb_ln, encoder.layers.N.
attn.Wqkv, attn.out_proj, mlp.fc11 (up), mlp.fc12 (gate), mlp.fc2,
norm1, norm2), which transformers renames as it loads, and its config.json
has nomic's keys (n_embd, n_head, n_layer, n_inner, rotary_emb_base,
activation_function "swiglu", prenorm false, ...) beside the ones
transformers reads. Both are written so here, and the loaded model is
checked to hold exactly the tensors written.

2 layers, hidden 64, 4 heads of 16, post-norm (LayerNorm after each
residual add, eps 1e-12), RoPE over the whole head with base 1000, SwiGLU
intermediate 128 (silu(fc12 x) * fc11 x), no biases but the LayerNorms',
token type embeddings (type 0 for every token). The vocabulary is
bert-cls-tiny's WordPiece (make_task_models.py). Run as family_models.py
says.
"""
import os

import torch
from safetensors.torch import save_file
from transformers import BertTokenizerFast, NomicBertModel

import family_models as fm

OUT = fm.golden_dir("nomic-bert-tiny-model")
GOLDEN = fm.golden_dir("nomic_bert_embeddings.json")
FAMILY = "nomic_bert"
LAYERS, HIDDEN, HEADS, INTER = 2, 64, 4, 128
# nomic-ai/nomic-embed-text-v1.5's config_sentence_transformers.json prompts.
PROMPTS = {"query": "search_query: ", "document": "search_document: ",
           "classification": "classification: ", "clustering": "clustering: "}


def spread(name, p):
    if "LayerNorm.weight" in name or "layernorm.weight" in name:
        return 1.0 + 0.3 * torch.randn_like(p)
    if "LayerNorm.bias" in name or "layernorm.bias" in name:
        return 0.2 * torch.randn_like(p)
    if "embeddings" in name:
        return torch.randn_like(p)
    return 0.2 * torch.randn_like(p)


def tokenizer():
    return BertTokenizerFast(tokenizer_file=fm.tokenizer_file(FAMILY), do_lower_case=True,
                             model_max_length=fm.MAX_TOKENS)


def config_json(tok):
    """nomic-embed-text-v1.5's config.json keys (nomic's and transformers'),
    tiny values."""
    return {
        "activation_function": "swiglu",
        "architectures": ["NomicBertModel"],
        "attn_pdrop": 0.0,
        "bos_token_id": None,
        "causal": False,
        "dense_seq_output": True,
        "embd_pdrop": 0.0,
        "eos_token_id": None,
        "fused_bias_fc": True,
        "fused_dropout_add_ln": True,
        "hidden_act": "silu",
        "hidden_size": HIDDEN,
        "initializer_range": 0.02,
        "intermediate_size": INTER,
        "layer_norm_eps": 1e-12,
        "layer_norm_epsilon": 1e-12,
        "max_position_embeddings": fm.MAX_TOKENS,
        "max_trained_positions": fm.MAX_TOKENS,
        "mlp_fc1_bias": False,
        "mlp_fc2_bias": False,
        "model_type": "nomic_bert",
        "n_embd": HIDDEN,
        "n_head": HEADS,
        "n_inner": INTER,
        "n_layer": LAYERS,
        "n_positions": fm.MAX_TOKENS,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "pad_token_id": tok.convert_tokens_to_ids("[PAD]"),
        "pad_vocab_size_multiple": 64,
        "parallel_block": False,
        "parallel_block_tied_norm": False,
        "prenorm": False,
        "qkv_proj_bias": False,
        "reorder_and_upcast_attn": False,
        "resid_pdrop": 0.0,
        "rope_parameters": {"rope_theta": 1000.0, "rope_type": "default"},
        "rotary_emb_base": 1000,
        "rotary_emb_fraction": 1.0,
        "rotary_emb_interleaved": False,
        "rotary_emb_scale_base": None,
        "rotary_scaling_factor": None,
        "scale_attn_by_inverse_layer_idx": False,
        "scale_attn_weights": True,
        "summary_activation": None,
        "summary_first_dropout": 0.0,
        "summary_proj_to_labels": True,
        "summary_type": "cls_index",
        "summary_use_proj": True,
        "torch_dtype": "float16",
        "type_vocab_size": 2,
        "use_cache": True,
        "use_flash_attn": True,
        "use_rms_norm": False,
        "use_xentropy": True,
        "vocab_size": fm.padded_vocab(tok),
    }


def nomic_names(state):
    """transformers' NomicBertModel tensors under the names of nomic's own
    code (the published checkpoint's), Q, K and V stacked into Wqkv."""
    out = {"embeddings.word_embeddings.weight": state["embeddings.word_embeddings.weight"],
           "embeddings.token_type_embeddings.weight":
               state["embeddings.token_type_embeddings.weight"],
           "emb_ln.weight": state["embeddings.LayerNorm.weight"],
           "emb_ln.bias": state["embeddings.LayerNorm.bias"]}
    for i in range(LAYERS):
        src, dst = "layers.%d." % i, "encoder.layers.%d." % i
        out[dst + "attn.Wqkv.weight"] = torch.cat(
            [state[src + "self_attn.%s_proj.weight" % x] for x in "qkv"])
        out[dst + "attn.out_proj.weight"] = state[src + "self_attn.o_proj.weight"]
        out[dst + "mlp.fc11.weight"] = state[src + "mlp.up_proj.weight"]
        out[dst + "mlp.fc12.weight"] = state[src + "mlp.gate_proj.weight"]
        out[dst + "mlp.fc2.weight"] = state[src + "mlp.down_proj.weight"]
        for n, m in (("norm1", "post_attention_layernorm"), ("norm2", "post_mlp_layernorm")):
            out[dst + n + ".weight"] = state[src + m + ".weight"]
            out[dst + n + ".bias"] = state[src + m + ".bias"]
    assert sum(v.numel() for v in out.values()) == sum(v.numel() for v in state.values())
    return {k: v.contiguous() for k, v in out.items()}


def tokenizer_config():
    """A BERT tokenizer_config.json, as nomic-embed-text-v1.5's."""
    return {"clean_up_tokenization_spaces": True, "cls_token": "[CLS]", "do_lower_case": True,
            "mask_token": "[MASK]", "model_max_length": fm.MAX_TOKENS, "pad_token": "[PAD]",
            "sep_token": "[SEP]", "strip_accents": None, "tokenize_chinese_chars": True,
            "tokenizer_class": "BertTokenizer", "unk_token": "[UNK]"}


def build(tmp):
    tok = tokenizer()
    model = fm.random_checkpoint(tmp, NomicBertModel, config_json(tok), tok, 20261210, spread)
    st = fm.sentence_model(tmp, "mean", prompts=PROMPTS)
    return st, {k: v.clone() for k, v in model.state_dict().items()}


def masking(st):
    fm.check_masks(st, 20, {None: lambda d: d == d})
    return {"layers": "every non-padding key (bidirectional, no window)",
            "read_from": "transformers.masking_utils.create_bidirectional_mask, checked on "
                         "the mask each layer is handed in a forward"}


def rope_base_10000(st):
    st[0].auto_model.config.rope_parameters["rope_theta"] = 10000.0


def fc11_fc12_swapped(st):
    for layer in st[0].auto_model.layers:
        m = layer.mlp
        m.up_proj.weight, m.gate_proj.weight = m.gate_proj.weight, m.up_proj.weight


def main():
    text_list = fm.texts()
    state = {}

    def build_keeping_state(tmp):
        st, tensors = build(tmp)
        state.update(tensors)
        return st

    fm.make_dir(build_keeping_state, OUT, FAMILY, HIDDEN, "mean_tokens",
                config_json(tokenizer()), tokenizer_config(), prompts=PROMPTS)
    save_file(nomic_names(state), os.path.join(OUT, "model.safetensors"), metadata={"format": "pt"})

    st = fm.load(OUT)
    fm.check_modules(st, ["Transformer", "Pooling", "Normalize"], PROMPTS)
    model = st[0].auto_model
    assert type(model).__name__ == "NomicBertModel"
    loaded = model.state_dict()
    for k, v in state.items():
        assert torch.equal(loaded[k], v.to(torch.float64)), k
    sets, vectors = fm.reference_sets(st, FAMILY, text_list, {
        "mean_normalized": None, "query_mean_normalized": "query"})
    plain = vectors["mean_normalized"]
    fm.write_embedding_golden(GOLDEN, OUT, text_list, sets, plain, masking(st), {
        "rope_base_10000": rope_base_10000, "fc11_fc12_swapped": fc11_fc12_swapped,
        "norm_weights_one": fm.norm_weights_set(1.0)}, PROMPTS)


if __name__ == "__main__":
    main()
