#!/usr/bin/env python3
"""Writes tests/golden/split-<name>/{tokenizer.json,cases.json.gz}: the tiny
tokenizers of tests/golden (the SentencePiece Unigram of xlmr-tiny, the
byte-level BPE of roberta-tiny) with a Split pre-tokenizer, and the ids,
byte offsets and decoded text Hugging Face `tokenizers` gives with each.
tests/unit/test_tokenizer_unigram.c compares model/tok_pipeline.c with them.

Unigram, Split then Metaspace: every behavior (Removed, Isolated,
MergedWithPrevious, MergedWithNext, Contiguous), String and Regex patterns,
invert, an empty-matching pattern and multi-line anchors (Oniguruma's ^ and $
match at line breaks), without a normalizer so that the patterns see line
breaks and every kind of space. BPE, Split then ByteLevel without its own regex: the
GPT-2 pattern (must equal the ByteLevel pre-tokenizer's built-in split), the
Llama-3 pattern and the o200k (GPT-4o) pattern.

Usage: build/venv-tok/bin/python tests/golden/make_split_cases.py
(scripts/tok-venv.sh makes that environment).
"""
import json
import os
import random
import sys

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import golden_io  # noqa: E402
from make_normalizer_cases import NORMALIZATION_CASES  # noqa: E402
from make_unigram_cases import CASES, make_cases  # noqa: E402

GPT2 = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
O200K = "|".join([
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    r"\p{N}{1,3}", r" ?[^\s\p{L}\p{N}]+[\r\n/]*", r"\s*[\r\n]+", r"\s+(?!\S)", r"\s+"])

SPLIT_CASES = [
    "Hello, world! How's it going?", "I'm sure they'll say we've done it, they'd've.",
    "HELLO'S WORLD'LL", "a,b,,c;;d", "x1y22z333w4444", "12345678 123 4", "tab\tsep\tvalues",
    "lines\nand\r\nmore\n\n\nlines\r", "  leading and trailing  ", "....!!!???", "$100.00 (approx)",
    "path/to/file.txt", "e-mail: someone@example.com", "def f(x):\n    return x**2\n",
    "CamelCaseWordsHere", "ALLCAPS lower MiXeD", "日本語とEnglish混在", "Привет,мир!",
    "\u0085nel\u0085", "\u00a0nbsp\u00a0", "\u2028sep\u2029", "x\u3000y", "ǅungla ǈ",
    "a\u0301b\u0301c\u0301", "Ⅻ ½ ² ١٢٣", "👍🏽👍🏽 ok", "'s 's'S", "xx xxx x", "\r\r\n\n",
]

ALPHABETS = [
    "abcxyzXYZ", "0123456789", " \t\n\r", ".,;:!?'\"-/()", "абвЖЗИ", "日本語",
    "\u0301\u0308", "\u0085\u00a0\u2028\u3000", "'sdtmlrev", "😀👍🏽", "ǅǈⅫ½²١",
]


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            a = rng.choice(ALPHABETS)
            parts.append("".join(rng.choice(a) for _ in range(rng.randint(1, 6))))
        out.append("".join(parts))
    return out


def split(pattern, behavior, invert=False, literal=False):
    return {"type": "Split", "pattern": {"String" if literal else "Regex": pattern},
            "behavior": behavior, "invert": invert}


def unigram_variants():
    meta = {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always",
            "split": True}
    for name, sp in [
        ("removed", split(" ", "Removed", literal=True)),
        ("isolated", split(r"\p{P}+", "Isolated")),
        ("previous", split(r"\s+", "MergedWithPrevious")),
        ("next", split(r"[,.!?;:]", "MergedWithNext")),
        ("contiguous", split(r"\d", "Contiguous")),
        ("invert", split(r"[\p{L}\p{M}]+", "Removed", invert=True)),
        ("empty", split(r"x*", "MergedWithPrevious")),
        ("anchors", split(r"^ *|\S$", "Isolated")),
        ("literal", split("..", "MergedWithNext", invert=True, literal=True)),
    ]:
        yield name, {"type": "Sequence", "pretokenizers": [sp, meta]}


def bpe_variants():
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": False}
    for name, pattern in [("gpt2", GPT2), ("llama3", LLAMA3), ("o200k", O200K)]:
        yield name, {"type": "Sequence",
                     "pretokenizers": [split(pattern, "Isolated"), byte_level]}


def write(name, tj, texts):
    d = os.path.join(HERE, "split-" + name)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "tokenizer.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    cases = make_cases(tokenizers.Tokenizer.from_file(path), texts)
    golden_io.dump({"tokenizers_version": tokenizers.__version__, "cases": cases},
                   os.path.join(d, "cases.json.gz"))
    print(d, len(cases), "cases")


def main():
    fixed = SPLIT_CASES + CASES + NORMALIZATION_CASES[:40]
    unigram = json.load(open(os.path.join(HERE, "xlmr-tiny", "tokenizer.json"), encoding="utf-8"))
    for name, pt in unigram_variants():
        tj = json.loads(json.dumps(unigram))
        tj["pre_tokenizer"] = pt
        # No normalizer: the charsmap would turn line breaks and the other
        # spaces into " " before the pattern sees them.
        tj["normalizer"] = None
        write(name, tj, fixed + random_strings(400, seed=len(name)))
    # RobertaProcessing's trim_offsets counts characters off byte offsets,
    # which the binding's character offsets cannot express for a multi-byte
    # space: those texts are left out, as for roberta-tiny.
    bpe = json.load(open(os.path.join(HERE, "roberta-tiny", "tokenizer.json"), encoding="utf-8"))
    for name, pt in bpe_variants():
        tj = json.loads(json.dumps(bpe))
        tj["pre_tokenizer"] = pt
        texts = [t for t in fixed + random_strings(600, seed=len(name) + 100)
                 if not any(c.isspace() and ord(c) > 0x7F for c in t)]
        write(name, tj, texts)


if __name__ == "__main__":
    main()
