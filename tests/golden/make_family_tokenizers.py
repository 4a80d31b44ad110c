#!/usr/bin/env python3
"""Writes tests/golden/fam-<name>/{tokenizer.json,cases.json.gz}: tiny
tokenizers laid out as the published checkpoints of the newer embedding
families lay theirs out, trained by Hugging Face `tokenizers` on the
multilingual paragraphs of make_unigram_tokenizer.py, and the ids, offsets,
special-token masks and decoded text the library gives on the texts of
make_unigram_cases.py, random strings and texts around the added tokens.
tests/unit/test_tokenizer_families.c compares model/tok_*.c with them.

  mpnet       all-mpnet-base-v2: WordPiece (BertNormalizer, BertPreTokenizer),
              TemplateProcessing <s> $A </s> / <s> $A </s> </s> $B </s>,
              <mask> added with lstrip, the model's unk [UNK] past <unk>.
  modernbert  ModernBERT-base (GPT-NeoX/OLMo vocabulary): byte-level BPE,
              no normalizer, TemplateProcessing [CLS] $A [SEP], the NeoX
              added tokens (runs of spaces and |||IP_ADDRESS||| normalized and
              not special), [MASK] with lstrip, [unused*].
  qwen3       Qwen3-Embedding: NFC, Split with Qwen2's pattern then ByteLevel
              without its regex, TemplateProcessing $A <|endoftext|>,
              the <|...|> specials and the non-special <think>/<tool_call>.
  gemma3      EmbeddingGemma: BPE with byte_fallback and fuse_unk, normalizer
              Replace " " -> "\u2581", no pre-tokenizer, <bos> $A <eos>,
              decoder Replace/ByteFallback/Fuse.
  flags       the Qwen3 layout with added tokens using lstrip, rstrip,
              single_word and normalized in combination.
  bytelevel   the Qwen3 layout with Llama-3's post-processor: Sequence of
              ByteLevel (trim_offsets) and the template. Its trimmed offsets
              can fall inside a multi-byte space, which the binding's
              character offsets cannot say: texts with one are left out.

The trainers break ties between equally frequent pairs in hash order, so
training twice can give different pieces: a committed tokenizer.json is kept
and only its cases are written again (byte for byte the same), unless
--retrain is given.

Usage: build/venv-tok/bin/python tests/golden/make_family_tokenizers.py [--retrain]
(scripts/tok-venv.sh makes that environment).
"""
import ast
import json
import os
import random
import sys

import tokenizers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden_io  # noqa: E402
from make_unigram_cases import ALPHABETS, CASES, make_cases  # noqa: E402

QWEN2 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|"
         r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus():
    """make_unigram_tokenizer.py's CORPUS, read without importing
    sentencepiece and transformers."""
    src = open(os.path.join(HERE, "make_unigram_tokenizer.py"), encoding="utf-8").read()
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and node.targets[0].id == "CORPUS":
            return ast.literal_eval(node.value).splitlines()
    raise SystemExit("CORPUS not found")


def template(single, pair, specials):
    return processors.TemplateProcessing(single=single, pair=pair, special_tokens=specials)


def mpnet(lines):
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=None, lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>", "[UNK]"]
    tok.train_from_iterator(lines, trainers.WordPieceTrainer(
        vocab_size=900, min_frequency=2, special_tokens=specials, show_progress=False))
    for s in specials:
        tok.add_special_tokens([AddedToken(s, normalized=False, special=True)])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.post_processor = template("<s>:0 $A:0 </s>:0", "<s>:0 $A:0 </s>:0 </s>:0 $B:1 </s>:1",
                                  [("<s>", 0), ("</s>", 2)])
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=True)
    return tok, ["<s>", "</s>", "<mask>", "<pad>", "<unk>", "[UNK]"]


def byte_level_bpe(lines, pre, vocab_size):
    tok = Tokenizer(models.BPE(dropout=None, unk_token=None, fuse_unk=False,
                               byte_fallback=False, ignore_merges=False))
    tok.pre_tokenizer = pre
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok


def modernbert(lines):
    tok = byte_level_bpe(lines, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                         trim_offsets=True, use_regex=True), 1000)
    tok.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    tok.add_tokens([AddedToken("|||IP_ADDRESS|||", normalized=True, special=False)])
    tok.add_special_tokens([AddedToken("<|padding|>", normalized=False, special=True),
                            AddedToken("<|endoftext|>", normalized=False, special=True)])
    tok.add_tokens([AddedToken(" " * n, normalized=True, special=False) for n in range(24, 1, -1)])
    tok.add_tokens([AddedToken("\t" * n, normalized=True, special=False) for n in (4, 3, 2)])
    tok.add_tokens([AddedToken("|||EMAIL_ADDRESS|||", normalized=True, special=False),
                    AddedToken("|||PHONE_NUMBER|||", normalized=True, special=False)])
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True)
                            for s in ("[UNK]", "[CLS]", "[SEP]", "[PAD]")])
    tok.add_special_tokens([AddedToken("[MASK]", lstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("[unused%d]" % i, normalized=True, special=False)
                    for i in range(4)])
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = template("[CLS]:0 $A:0 [SEP]:0", "[CLS]:0 $A:0 [SEP]:0 $B:1 [SEP]:1",
                                  [("[CLS]", cls), ("[SEP]", sep)])
    return tok, ["[CLS]", "[SEP]", "[MASK]", "<|endoftext|>", "|||IP_ADDRESS|||", "  ",
                 "    ", "\t\t", "[unused1]", "[PAD]", "<|padding|>"]


def qwen3(lines):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
    tok = byte_level_bpe(lines, pre, 1200)
    tok.normalizer = normalizers.NFC()
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
                "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>",
                "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
                "<|image_pad|>", "<|video_pad|>"]
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials])
    tok.add_tokens([AddedToken(s, normalized=False, special=False)
                    for s in ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
                              "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>",
                              "<tool_response>", "</tool_response>", "<think>", "</think>")])
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = template("$A:0 <|endoftext|>:0",
                                  "$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
                                  [("<|endoftext|>", eot)])
    return tok, ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>",
                 "<tool_call>", "<|fim_pad|>"]


def gemma3(lines):
    specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "[multimodal]"]
    specials += ["<0x%02X>" % b for b in range(256)]
    tok = Tokenizer(models.BPE(unk_token="<unk>", fuse_unk=True, byte_fallback=True))
    tok.normalizer = normalizers.Replace(" ", "\u2581")
    # SentencePiece splits at spaces while training; the published
    # tokenizer.json has no pre-tokenizer, so merges run over whole texts.
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
    tok.train_from_iterator(lines, trainers.BpeTrainer(
        vocab_size=1300, min_frequency=2, special_tokens=specials, limit_alphabet=200,
        show_progress=False))
    tok.pre_tokenizer = None
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in specials[:6]])
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True)
                            for s in ("<start_of_turn>", "<end_of_turn>", "<start_of_image>",
                                      "<end_of_image>")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    tok.post_processor = template("<bos>:0 $A:0 <eos>:0", "<bos>:0 $A:0 <eos>:0 $B:1 <eos>:1",
                                  [("<bos>", 2), ("<eos>", 1)])
    return tok, ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>", "<mask>", "<unk>",
                 "<pad>"]


def flags(lines):
    tok, _ = qwen3(lines)
    combos = [("[L]", dict(lstrip=True)), ("[R]", dict(rstrip=True)),
              ("[LR]", dict(lstrip=True, rstrip=True)), ("word", dict(single_word=True)),
              ("[W]", dict(single_word=True, lstrip=True, rstrip=True)),
              ("Ünï", dict(normalized=True)), ("e\u0301", dict(normalized=True, lstrip=True)),
              ("ab c", dict(normalized=True, rstrip=True, single_word=True)),
              ("日本", dict(single_word=True, normalized=False))]
    for content, kw in combos:
        kw.setdefault("normalized", False)
        tok.add_tokens([AddedToken(content, **kw)])
    tok.add_special_tokens([AddedToken("<SW>", single_word=True, lstrip=True, normalized=True,
                                       special=True)])
    return tok, ["[L]", "[R]", "[LR]", "word", "[W]", "Ünï", "U\u0308nï", "e\u0301", "é",
                 "ab c", "日本", "<SW>", "<|endoftext|>", "<think>"]


def bytelevel(lines):
    tok, specials = qwen3(lines)
    eot = tok.token_to_id("<|endoftext|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
        template("$A:0 <|endoftext|>:0", "$A:0 <|endoftext|>:0 $B:1 <|endoftext|>:1",
                 [("<|endoftext|>", eot)])])
    return tok, specials


FLAG_TEXTS = [
    "a [L] b", "a   [L]", "[L][L]", "x\t\n[R]  y", "[R]   [L]", "  [LR]  ", "a[LR]b",
    "word", "a word b", "words", "sword", "word_x", "word!", "wordé", "日本語", "の日本",
    " 日本 ", "a [W] b", "a[W]b", "x [W]", "Ünïcode Ünï", "U\u0308nï here", "cafe\u0301 é",
    "ab c", "ab cd", "xab c", "ab c   d", "<SW> x", "a<SW>", "  <SW>  ", "e\u0301e\u0301",
    "ab  c", "\u3000[L]\u3000", "word\u0301", "9word", "word\u200d", "_word", "word٣",
]


def random_strings(n, seed, specials):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.12:
                parts.append(rng.choice(specials))
            elif r < 0.16:
                parts.append(chr(rng.randint(0x20, 0x2FFF)))
            elif r < 0.18:
                parts.append(chr(rng.randint(0x10000, 0x10FFFF)))
            else:
                a = rng.choice(ALPHABETS)
                parts.append("".join(rng.choice(a) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def main():
    retrain = "--retrain" in sys.argv[1:]
    lines = corpus() * 4
    for seed, (name, build) in enumerate([("mpnet", mpnet), ("modernbert", modernbert),
                                          ("qwen3", qwen3), ("gemma3", gemma3),
                                          ("flags", flags), ("bytelevel", bytelevel)]):
        d = os.path.join(HERE, "fam-" + name)
        path = os.path.join(d, "tokenizer.json")
        tok, specials = build(lines)
        if retrain or not os.path.exists(path):
            os.makedirs(d, exist_ok=True)
            tok.save(path)
        tok = Tokenizer.from_file(path)
        texts = CASES + [s + " " + t for s in specials for t in ("x", "")]
        texts += [t for s in specials for t in (" %s x" % s, "a%sb" % s, "  %s  " % s)]
        texts += FLAG_TEXTS + random_strings(700, 4000 + seed, specials)
        if name == "bytelevel":
            texts = [t for t in texts if not any(c.isspace() and ord(c) > 0x7F for c in t)]
        cases = make_cases(tok, texts)
        golden_io.dump({"tokenizers_version": tokenizers.__version__, "cases": cases},
                       os.path.join(d, "cases.json.gz"))
        print(d, tok.get_vocab_size(), "tokens,", len(cases), "cases")


if __name__ == "__main__":
    main()
