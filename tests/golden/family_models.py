"""What the generators of the tiny random-weight checkpoints share.

Every one draws random weights (randomise) and saves a sentence-transformers
directory (save_dir, sentence_model) whose size it prints (dir_size). The
first ones, make_xlmr_model.py, make_roberta_model.py and
make_mpnet_model.py, save the directory as sentence-transformers writes it
and record the float32 vectors it computes (load_as_saved, encode,
write_float32_golden). The newer families' ones, make_modernbert_model.py,
make_modernbert_reranker.py, make_qwen3_model.py, make_gemma3_model.py and
make_nomic_bert_model.py, rewrite the saved files into the published
checkpoints' layout (make_dir) and record a float64 reference run with its
sensitivity runs (write_golden); the rest of this text is about them.

Each is run with an environment that has torch, transformers and
sentence-transformers: the bench's venv, which `make task-models` makes
(~/.cache/attnserve/bench-embed/venv; it runs every generator but the XLM-R
and RoBERTa ones), as
    PY tests/golden/make_NAME.py

The texts are the multilingual paragraphs of make_family_tokenizers.py (the
corpus its tokenizers were trained on, read through its corpus()), an empty
text, "The" (one content token in all three family tokenizers), and joins of
the paragraphs of 60 to 500 tokens: past every sliding window the models
have, and within their 512 positions with a prompt in front.

The reference: transformers casts to float32 inside a float64 model in a
few places (the RoPE tables and ModernBERT's rotation, Qwen3's and Gemma3's
RMSNorm, the eager attention's softmax). exact_float64() replaces those
steps, on the loaded modules, by the same formulas in float64, the
attention runs through SDPA (its CPU math path keeps float64 throughout),
and an operation that gives any other floating dtype fails the run. The
golden is then the model's value in float64 arithmetic, and a test may
measure its own error against it. The goldens record how far the runs as
transformers ships them (float64 with its float32 steps, and float32) lie
from it: under 1e-6 per component, which bounds what the replaced steps change.
"""
import json
import os
import platform
import shutil
import sys
import tempfile
import types
from contextlib import contextmanager

import numpy as np
import sentence_transformers
import tokenizers
import torch
import transformers
from sentence_transformers import SentenceTransformer, models
from transformers import PreTrainedTokenizerFast
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden_io  # noqa: E402
import make_family_tokenizers  # noqa: E402

MAX_TOKENS = 512


def texts():
    """The golden inputs, the same for every family."""
    par = make_family_tokenizers.corpus()
    return par + [
        "",
        "The",
        "Hello",
        "  leading spaces, trailing spaces  ",
        "Tabs\tand\nnew\nlines\r\nmixed",
        " ".join(par[:4]),
        " ".join(par[:10]),
        " ".join(par[:8]) + " " + " ".join(par[:8]),
    ]


def tokenizer_file(family):
    """The committed fam-<family>/tokenizer.json (make_family_tokenizers.py
    keeps it, as two trainings need not give the same pieces); nomic_bert
    has BERT's WordPiece layout, which bert-cls-tiny's tokenizer has
    (make_task_models.py)."""
    return os.path.join(HERE, "bert-cls-tiny" if family == "nomic_bert" else "fam-" + family,
                        "tokenizer.json")


def golden_dir(name):
    """The path of name in tests/golden."""
    return os.path.join(HERE, name)


def padded_vocab(tok):
    """The embedding table's rows: tok's vocabulary padded to a multiple of
    64, as the published checkpoints pad theirs."""
    return (len(tok) + 63) // 64 * 64


def fast_tokenizer(family, **special):
    """The committed family tokenizer as transformers' fast tokenizer, with
    the special tokens named in special."""
    return PreTrainedTokenizerFast(tokenizer_file=tokenizer_file(family),
                                   model_max_length=MAX_TOKENS,
                                   model_input_names=["input_ids", "attention_mask"], **special)


def randomise(model, seed, spread):
    """Draws every parameter again: spread(name, p) gives the tensor it
    takes. Spreads far above the default initialisation make each tensor
    move the vectors far past the tests' floors. seed None carries on from
    torch's current state (roberta_dir seeds before building the model,
    whose initialisation draws first)."""
    if seed is not None:
        torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(spread(name, p))
    model.eval()


def encoder_spread(name, p):
    """The spread of the first tiny embedders (XLM-R, RoBERTa, MPNet):
    every tensor, biases and LayerNorms included, large enough that
    attention mixes tokens and every position row (and relative bucket)
    matters, so a wrong position numbering or a skipped tensor moves the
    vectors far past the tests' floors. normal_ draws as the committed
    weights were drawn."""
    if "LayerNorm.weight" in name:
        return 1.0 + 0.2 * torch.randn_like(p)
    if "relative_attention_bias" in name:
        # Larger than the scores' spread, so each bucket steers attention
        # and the vectors depend on every one of them.
        return torch.empty_like(p).normal_(0.0, 4.0)
    if "embeddings" in name:
        return torch.empty_like(p).normal_(0.0, 0.5)
    return torch.empty_like(p).normal_(0.0, 0.15)


def family_spread(name, p, embeddings):
    """The newer families' spread: norm weights about 1, the token
    embeddings (the tensor whose name holds embeddings) N(0, 1), and every
    other tensor 0.2 N(0, 1): scores of a few units, so attention is far
    from uniform and the masking and the rotation steer it."""
    if "norm" in name:
        return 1.0 + 0.3 * torch.randn_like(p)
    if embeddings in name:
        return torch.randn_like(p)
    return 0.2 * torch.randn_like(p)


def roberta_dir(path, classes, tokenizer_path, seed, max_tokens, **config):
    """A tiny RoBERTa-layout encoder (classes: its tokenizer, config and
    model classes) with the tokenizer in tokenizer_path, saved to path, as
    a SentenceTransformer with mean pooling: 2 layers, hidden 64, 4 heads,
    max_tokens + 2 position rows (padding_idx 1, then max_tokens positions),
    config the class's other settings. torch is seeded before the model is
    built and encoder_spread draws on from there, as the committed weights
    were drawn."""
    tokenizer_cls, config_cls, model_cls = classes
    tok = tokenizer_cls(tokenizer_file=tokenizer_path)
    assert tok.pad_token_id == 1 and tok.bos_token_id == 0 and tok.eos_token_id == 2
    cfg = config_cls(vocab_size=len(tok), hidden_size=64, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=128, hidden_act="gelu",
                     max_position_embeddings=max_tokens + 2, type_vocab_size=1,
                     layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                     **config)
    torch.manual_seed(seed)
    model = model_cls(cfg, add_pooling_layer=False)
    randomise(model, None, encoder_spread)
    model.save_pretrained(path, safe_serialization=True)
    tok.model_max_length = max_tokens
    tok.save_pretrained(path)
    return sentence_model(path, "mean", max_tokens)


def random_checkpoint(path, cls, config, tok, seed, spread):
    """Writes config as path/config.json, builds cls (a transformers model
    class) from it with weights drawn by randomise(seed, spread), and saves
    it there in float16 (to_float16) with tok. Returns the model."""
    write_json(os.path.join(path, "config.json"), config)
    model = cls(cls.config_class.from_pretrained(path))
    randomise(model, seed, spread)
    to_float16(model).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)
    return model


def sentence_model(path, pooling, max_tokens=MAX_TOKENS, dense=(), **kwargs):
    """The SentenceTransformer of the checkpoint in path: Transformer,
    Pooling (mode pooling), the Dense modules dense, Normalize; kwargs go to
    SentenceTransformer."""
    transformer = models.Transformer(path, max_seq_length=max_tokens)
    dim = transformer.get_word_embedding_dimension()
    return SentenceTransformer(
        modules=[transformer, models.Pooling(dim, pooling), *dense, models.Normalize()],
        device="cpu", **kwargs)


def save_dir(build, out):
    """Saves build(tmp) (a SentenceTransformer built on a checkpoint in tmp)
    as the directory out, replacing it."""
    with tempfile.TemporaryDirectory() as tmp:
        st = build(tmp)
        shutil.rmtree(out, ignore_errors=True)
        st.save(out)


def remove_files(path, names):
    """Removes the files names in path that exist (the model card, the slow
    tokenizers' files, ...)."""
    for name in names:
        if os.path.exists(os.path.join(path, name)):
            os.remove(os.path.join(path, name))


def copy_tokenizer(path, family):
    """The committed tokenizer.json byte for byte (transformers' save
    rewrites it)."""
    shutil.copyfile(tokenizer_file(family), os.path.join(path, "tokenizer.json"))


def rewrite_json(path, fn):
    """Replaces the JSON object in path by fn(object), written with indent 2
    as transformers and sentence-transformers write theirs."""
    with open(path, encoding="utf-8") as f:
        obj = json.load(f)
    write_json(path, fn(obj))


def write_json(path, obj):
    with open(path, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=2, ensure_ascii=False)
        f.write("\n")


POOLING_MODES = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
                 "weightedmean_tokens", "lasttoken")


def pooling_config(dim, mode):
    """1_Pooling/config.json as the published checkpoints have it
    (sentence-transformers 2 and 3's boolean keys; 6 writes one
    "pooling_mode" name instead)."""
    assert mode in POOLING_MODES, mode
    c = {"word_embedding_dimension": dim}
    c.update(("pooling_mode_" + m, m == mode) for m in POOLING_MODES)
    c["include_prompt"] = True
    return c


def finish_dir(out, family, dim, pooling, denses=0, prompts=None, max_tokens=MAX_TOKENS):
    """Rewrites what st.save() wrote into the published checkpoints' layout:
    the committed tokenizer.json byte for byte (transformers' save rewrites
    it), no model card; modules.json with the sentence_transformers.models.*
    names, 1_Pooling in the boolean form, Dense configs without
    sentence-transformers 6's module_input_name, no 2_Normalize/config.json
    (the published directory is empty, so absent from git),
    sentence_bert_config.json as {max_seq_length, do_lower_case}, and
    config_sentence_transformers.json with the prompts. The directory is
    read back through sentence-transformers afterwards, so it must load."""
    remove_files(out, ("README.md", "vocab.txt", "merges.txt", "vocab.json",
                       "special_tokens_map.json", "chat_template.jinja"))
    copy_tokenizer(out, family)
    mods = [("", "Transformer"), ("1_Pooling", "Pooling")]
    mods += [("%d_Dense" % (2 + i), "Dense") for i in range(denses)]
    mods += [("%d_Normalize" % (2 + denses), "Normalize")]
    write_json(os.path.join(out, "modules.json"),
               [{"idx": i, "name": str(i), "path": path,
                 "type": "sentence_transformers.models." + t} for i, (path, t) in enumerate(mods)])
    write_json(os.path.join(out, "1_Pooling", "config.json"), pooling_config(dim, pooling))
    for path, t in mods:
        if t == "Dense":
            rewrite_json(os.path.join(out, path, "config.json"), lambda c: {
                k: c[k] for k in ("in_features", "out_features", "bias", "activation_function")})
    norm = os.path.join(out, mods[-1][0])
    for name in os.listdir(norm):
        os.remove(os.path.join(norm, name))
    os.rmdir(norm)
    write_json(os.path.join(out, "sentence_bert_config.json"),
               {"max_seq_length": max_tokens, "do_lower_case": False})
    write_json(os.path.join(out, "config_sentence_transformers.json"), {
        "__version__": {"sentence_transformers": sentence_transformers.__version__,
                        "transformers": transformers.__version__, "pytorch": torch.__version__},
        "prompts": prompts or {},
        "default_prompt_name": None,
        "similarity_fn_name": "cosine",
    })


def make_dir(build, out, family, dim, pooling, config, tokenizer_config, denses=0,
             prompts=None):
    """Saves build(tmp) to out (save_dir) in the published layout
    (finish_dir), with config.json and tokenizer_config.json the given
    objects: saving writes transformers 5's layouts over them."""
    save_dir(build, out)
    finish_dir(out, family, dim, pooling, denses, prompts)
    write_json(os.path.join(out, "config.json"), config)
    write_json(os.path.join(out, "tokenizer_config.json"), tokenizer_config)


def to_float16(model):
    """Weights as float16 on disk (the service reads F16 tensors): half the
    size of float32, and the float64 reference runs on exactly the stored
    values."""
    return model.to(torch.float16)


def dir_size(path):
    """The bytes of every file under path."""
    return sum(os.path.getsize(os.path.join(d, n)) for d, _, ns in os.walk(path) for n in ns)


def _rope64(module, x, position_ids, layer_type=None):
    """The RoPE table in float64: transformers computes inv_freq and the
    angles in float32 whatever the model's dtype."""
    cfg = module.config
    params = cfg.rope_parameters[layer_type] if layer_type else cfg.rope_parameters
    assert params["rope_type"] == "default", params
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv = 1.0 / (params["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids[..., None].to(torch.float64) * inv
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def _rms_norm_qwen(module, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return module.weight * (x * torch.rsqrt(var + module.variance_epsilon))


def _rms_norm_gemma(module, x):
    var = x.pow(2).mean(-1, keepdim=True)
    return (x * torch.rsqrt(var + module.eps)) * (1.0 + module.weight)


def _modernbert_rotary(q, k, cos, sin, unsqueeze_dim=1):
    from transformers.models.modernbert.modeling_modernbert import rotate_half
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


class _Float64Only(TorchDispatchMode):
    """Fails on any operation that gives a floating tensor other than
    float64: the proof that exact_float64() left no float32 step."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                assert t.dtype == torch.float64, "%s gave %s" % (func, t.dtype)
        return out


@contextmanager
def exact_float64(st):
    """st (a SentenceTransformer) in float64 with transformers' float32
    steps replaced by float64 ones (module docstring); inside it, an
    operation that gives a float32 (or any other non-float64) tensor fails."""
    from transformers.models.modernbert import modeling_modernbert
    st.to(torch.float64)
    patched = 0
    for m in st.modules():
        kind = type(m).__name__
        if kind.endswith("RotaryEmbedding"):
            m.forward = types.MethodType(_rope64, m)
        elif kind in ("Qwen3RMSNorm",):
            m.forward = types.MethodType(_rms_norm_qwen, m)
        elif kind in ("Gemma3RMSNorm",):
            m.forward = types.MethodType(_rms_norm_gemma, m)
        else:
            continue
        patched += 1
    assert patched, "no module replaced: not a RoPE model?"
    saved = modeling_modernbert.apply_rotary_pos_emb
    modeling_modernbert.apply_rotary_pos_emb = _modernbert_rotary
    try:
        with _Float64Only():
            yield st
    finally:
        modeling_modernbert.apply_rotary_pos_emb = saved


def layer_masks(st, n):
    """The mask each layer of st's model is handed in a forward over n
    tokens without padding (eager attention, so every mask is built out):
    a list of [n, n] bool tensors, allowed[i, j] when query i sees key j.
    The masking a family's golden states is read off these, not assumed."""
    model = st[0].auto_model
    seen = {}

    def hook(i):
        return lambda mod, args, kwargs: seen.__setitem__(i, kwargs["attention_mask"])

    model.set_attn_implementation("eager")
    hooks = [layer.register_forward_pre_hook(hook(i), with_kwargs=True)
             for i, layer in enumerate(model.layers)]
    try:
        ids = torch.full((1, n), 5)
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
    finally:
        for h in hooks:
            h.remove()
        model.set_attn_implementation("sdpa")
    # None: the mask builder skipped an all-allowed mask (eager attention
    # then applies none, causal modules or not).
    return [torch.ones(n, n, dtype=torch.bool) if seen[i] is None else seen[i][0, 0] == 0
            for i in range(len(model.layers))]


def check_masks(st, n, predicates):
    """Checks that layer i's mask is predicates[layer_types[i]](d), d the
    tensor of i - j (layer type None where the config has no layer_types),
    and returns the layer types found."""
    model = st[0].auto_model
    types_ = getattr(model.config, "layer_types", None) or [None] * len(model.layers)
    pos = torch.arange(n)
    d = pos[:, None] - pos[None, :]
    for i, (m, t) in enumerate(zip(layer_masks(st, n), types_)):
        assert torch.equal(m, predicates[t](d)), ("layer %d (%s): mask differs" % (i, t), m.int())
    return types_


def check_modules(st, names, prompts=None):
    """Checks st's modules are of the classes names, and its prompts."""
    assert [type(m).__name__ for m in st] == names, list(st)
    if prompts is not None:
        assert st.prompts == prompts, st.prompts


def load_as_saved(path):
    """The directory of the first tiny embedders as sentence-transformers
    loads it (float32), checked to be Transformer, Pooling, Normalize."""
    st = SentenceTransformer(path, device="cpu")
    check_modules(st, ["Transformer", "Pooling", "Normalize"])
    return st


def unpadded_ids(features):
    """The ids of each row of tokenized features, padding left out."""
    return [[int(t) for t, m in zip(row, mask) if m]
            for row, mask in zip(features["input_ids"].tolist(),
                                 features["attention_mask"].tolist())]


def encode(st, text_list):
    """The first tiny embedders' golden cases, one a text: the text, its ids
    and its vector as st computes it in batches of 8 (float32, 9 digits;
    not normalised by encode: the Normalize module already made it a unit
    vector)."""
    ids = unpadded_ids(st.tokenize(text_list))
    emb = st.encode(text_list, batch_size=8, convert_to_numpy=True, normalize_embeddings=False)
    return [{"text": t, "ids": i,
             "embedding": [float(f"{x:.9g}") for x in np.asarray(v, dtype=np.float32)]}
            for t, i, v in zip(text_list, ids, emb)]


def load(path, dtype=torch.float64):
    """The directory as sentence-transformers loads it, on the CPU, with
    SDPA attention (float64 inside, where eager's softmax is float32)."""
    st = SentenceTransformer(path, device="cpu",
                             model_kwargs={"attn_implementation": "sdpa", "dtype": dtype})
    return st.to(dtype)


def embed(st, text_list, prompt_name=None):
    """One text at a time (no padding in any batch), as float64 arrays."""
    out = []
    for t in text_list:
        v = st.encode([t], prompt_name=prompt_name, batch_size=1, convert_to_tensor=True,
                      normalize_embeddings=False)
        assert v.dtype == st[0].auto_model.dtype, v.dtype
        out.append(v[0].double().numpy())
    return np.array(out)


def token_ids(st, text_list, prompt_name=None):
    """The ids sentence-transformers feeds the model (prompt included)."""
    prompt = st.prompts[prompt_name] if prompt_name else ""
    return [unpadded_ids(st.tokenize([prompt + t]))[0] for t in text_list]


def check_ids(family, text_list, ids, prompt=""):
    """The ids are what the family tokenizer gives, untruncated."""
    plain = tokenizers.Tokenizer.from_file(tokenizer_file(family))
    for t, got in zip(text_list, ids):
        want = plain.encode(prompt + t).ids
        assert want == got, (family, t[:40], want[:10], got[:10])


def cases(text_list, ids, vectors):
    return [{"text": t, "ids": i, "embedding": [float(x) for x in v]}
            for t, i, v in zip(text_list, ids, vectors)]


def min_cosine(a, b):
    a = a / np.linalg.norm(a, axis=1, keepdims=True)
    b = b / np.linalg.norm(b, axis=1, keepdims=True)
    return float(np.min(np.sum(a * b, axis=1)))


def max_abs(a, b):
    return float(np.max(np.abs(a - b)))


def shipped_error(path, text_list, ref, prompt_name=None):
    """How far transformers' own float64 and float32 runs lie from the
    exact float64 reference (max |difference| of a component)."""
    out = {}
    for name, dtype in (("float64_as_shipped", torch.float64), ("float32", torch.float32)):
        st = load(path, dtype)
        out[name + "_max_abs"] = max_abs(embed(st, text_list, prompt_name), ref)
    return out


def versions():
    """The versions a golden was made with, recorded in it."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sentence_transformers": sentence_transformers.__version__,
        "transformers": transformers.__version__,
        "tokenizers": tokenizers.__version__,
    }


def repo_path(path):
    """path relative to the repository's root, as the goldens name files."""
    return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.dirname(HERE)))


def write_float32_golden(path, out_dir, max_tokens, sets, extra=None):
    """The first tiny embedders' golden JSON: the model directory, the
    script, the versions, sets (name -> cases) and extra (name -> any other
    value); prints what was made."""
    golden = {"model": repo_path(out_dir), "max_tokens": max_tokens,
              "made_by": repo_path(sys.argv[0]), "versions": versions()}
    golden.update(sets)
    golden.update(extra or {})
    golden_io.dump(golden, path)
    lengths = [len(c["ids"]) for s in sets.values() for c in s]
    print(f"{out_dir}: {dir_size(out_dir)} bytes; {len(lengths)} cases, tokens "
          f"{min(lengths)}..{max(lengths)}", file=sys.stderr)


def reference_sets(st, family, text_list, sets):
    """sets: golden set name -> prompt name (None: no prompt). Checks the
    ids against the family tokenizer and runs st exactly in float64.
    Returns (name -> cases, name -> vectors)."""
    cases_, vectors = {}, {}
    for name, prompt in sets.items():
        ids = token_ids(st, text_list, prompt)
        check_ids(family, text_list, ids, st.prompts[prompt] if prompt else "")
        with exact_float64(st):
            vectors[name] = embed(st, text_list, prompt)
        cases_[name] = cases(text_list, ids, vectors[name])
    return cases_, vectors


def sensitivity(path, text_list, golden, changes):
    """changes: name -> change(st). Each change is made on the directory
    loaded afresh, so none carries over; returns name -> the lowest cosine
    over the inputs between the changed model's vectors and golden's."""
    out = {}
    for name, change in changes.items():
        st = load(path)
        with exact_float64(st):
            change(st)
            out[name] = min_cosine(embed(st, text_list), golden)
    return out


def norm_weights_set(value):
    """A sensitivity change: every norm weight set to value (1 for
    LayerNorm and Qwen3's RMSNorm, 0 for Gemma's 1 + weight)."""
    def change(st):
        with torch.no_grad():
            for n, p in st.named_parameters():
                if "norm" in n.lower() and n.endswith("weight"):
                    p.fill_(value)
    return change


def write_embedding_golden(path, out_dir, text_list, sets, golden, masking, changes,
                           prompts=None):
    """write_golden of an embedder's sets, with its prompts (the query and
    document ones), masking, the sensitivity of golden (the vectors of
    text_list without a prompt) to changes, and the shipped runs' error."""
    meta = {"prompts": {k: prompts[k] for k in ("query", "document")}} if prompts else {}
    meta.update(masking=masking, sensitivity=sensitivity(out_dir, text_list, golden, changes),
                shipped_run_error=shipped_error(out_dir, text_list, golden))
    write_golden(path, meta, sets, out_dir)


def write_golden(path, meta, sets, out_dir):
    """meta (masking, sensitivity, ...) with the model directory, the
    script, the versions and sets (name -> cases) as the golden JSON
    tests/unit/golden_embeddings.c reads; prints what was made."""
    golden = {"model": repo_path(out_dir), "made_by": repo_path(sys.argv[0]),
              "max_tokens": MAX_TOKENS,
              "attention": "sdpa (exact in float64 on the CPU; the eager path's softmax is "
                           "float32 in ModernBERT, Qwen3 and Gemma3)"}
    golden.update(meta, versions=dict(versions(), numpy=np.__version__), precision=(
        "float64; RoPE tables, RMSNorm and ModernBERT's rotation in float64 in place of "
        "transformers' float32 steps, SDPA attention (tests/golden/family_models.py)"))
    golden.update(sets)
    golden_io.dump(golden, path)
    lengths = [len(c["ids"]) for s in sets.values() for c in s]
    print(f"{out_dir}: {dir_size(out_dir)} bytes; {len(lengths)} cases, tokens "
          f"{min(lengths)}..{max(lengths)}; sensitivity {meta.get('sensitivity')}; "
          f"shipped {meta.get('shipped_run_error')}", file=sys.stderr)
