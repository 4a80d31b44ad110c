#!/usr/bin/env python3
"""Writes tests/golden/unigram_cases.json.gz: the ids, offsets and decoded text
Hugging Face `tokenizers` gives with tests/golden/xlmr-tiny/tokenizer.json
(made by make_unigram_tokenizer.py) for text in many scripts and for a few
thousand random strings; then, for other layouts of the same model
(variants() below), tests/golden/unigram-<name>/{tokenizer.json,cases.json.gz}.
tests/unit/test_tokenizer_unigram.c compares model/tok_pipeline.c with them.

Usage: build/venv-tok/bin/python tests/golden/make_unigram_cases.py
(scripts/tok-venv.sh makes that environment).
"""
import json
import os
import random

import tokenizers

import golden_io
from make_tokenizer_cases import byte_offsets

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "xlmr-tiny", "tokenizer.json")
OUT = os.path.join(HERE, "unigram_cases.json.gz")

CASES = [
    "", " ", "   ", "\t\n", "Hello, world!", "hello world", "HELLO   WORLD  ",
    "The quick brown fox jumps over the lazy dog.",
    "Embeddings map sentences to vectors.",
    "Numbers like 3.14, 2024-05-01 and 1,000,000.",
    # Bulgarian, Tsonga
    "Бързата кафява лисица прескача мързеливото куче.",
    "Документите се обработват в София.", "БЪЛГАРИЯ и българският език",
    "Nhlangano wa vanhu wu hlengeletana emugangeni.",
    "Ndzi tsakile ku mi vona. Xitsonga xi vulavuriwa eMozambique.",
    "ensin'wini", "Xitsonga na Xichangana",
    # Chinese, Japanese, Korean
    "敏捷的棕色狐狸跳过了懒狗。", "检索系统将查询与文档配对，并按相似度排序。",
    "日本語のテキストです。", "한국어 텍스트", "ｶﾀｶﾅ ＡＢＣ １２３", "〇一二三",
    # Arabic, Hebrew, Devanagari
    "الثعلب البني السريع يقفز فوق الكلب الكسول.", "اللُّغَةُ الْعَرَبِيَّةُ",
    "\u0600\u0661\u0662", "שָׁלוֹם עוֹלָם",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।", "नमस्ते दुनिया", "क्षत्रिय",
    # emoji
    "😀 🍕 👍🏽", "👨‍👩‍👧 family", "🇧🇬 🇲🇿", "❤️ heart", "1️⃣ keycap", "a🏻b", "©\u200d©",
    # combining marks and NFKC
    "cafe\u0301", "nai\u0308ve", "n\u0303", "e\u0301\u0302\u0303", "a\u0308\u0304",
    "\u0301\u0301 start", "z\u0335\u0321\u031b\u0337algo", "ﬁ ﬂ ﬃ", "ﬁ\u0301", "½ ⅓ ¼",
    "Ångström Å Å", "Ω Ω", "ＡＢＣ１２３", "㍿ ㈱", "ℌ ℍ", "x²", "™", "…", "‥",
    # invalid-looking but valid UTF-8
    "\u00c3\u00a9", "\ufffd", "\ufeffbom", "soft\u00adhyphen", "zero\u200bwidth",
    "zwj\u200djoin", "\U0010ffff", "\ue000 private", "\U000e0001 tag", "\u2028\u2029",
    "\x00nul", "\x7f del", "\x1b[0m", "\x85 nel",
    # whitespace
    "a  b", "a   b    c", " leading", "trailing ", "  both  ", "tab\tsep", "cr\r\nlf",
    "\r\n", "line\u2028sep", "em\u2003space", "ideographic\u3000space", "nbsp\u00a0x",
    " " * 50 + "x" + " " * 50, "\n" * 30, "x" + "\t " * 40 + "y",
    # added tokens typed in the text
    "<s>", "</s> in text", "a <mask> b", "a   <mask>", "<mask><mask>", "x<pad>y", "<unk>",
    "<s><s>", "<mask>", " <mask>", "\u3000<mask>",
    # unknown characters and long words
    "ꙮ ꙮꙮ", "𓀀𓀁", "ᚠᚢᚦ", "a" * 300, "йй" * 100, "丌" * 50,
    "Transformers' self-attention is O(n^2).",
]

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ", "0123456789",
    "абвгдежзийклмнопрстуфхцчшщъьюя", "АБВГДЕЖЗИЙКЛМНОПРСТУФХЦЧШЩЪЬЮЯ",
    "敏捷的棕色狐狸跳过了懒狗文档处理系统", "الثعلببنيسريعيقفز", "तेज़भूरीलोमड़ीआलसी",
    "😀🍕👍🏽❤️🇧🇬", "\u0301\u0308\u0303\u0327\u064e\u064f\u0650\u093c",
    "   \t\n\r\u3000\u00a0\u2003", ".,;:!?'\"()[]{}-", "<>/smak", "ﬁﬂ½ＡＢ１２",
    "\u200b\u200c\u200d\ufeff\u00ad", "ÀÉÎÕÜçñøåæ",
]


def random_strings(n, seed=1234):
    rng = random.Random(seed)
    specials = ["<s>", "</s>", "<mask>", "<pad>", "<unk>"]
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 12)):
            r = rng.random()
            if r < 0.05:
                parts.append(rng.choice(specials))
            elif r < 0.1:
                parts.append(chr(rng.randint(0x20, 0x2FFF)))
            elif r < 0.13:
                cp = rng.randint(0x10000, 0x10FFFF)
                parts.append(chr(cp))
            else:
                a = rng.choice(ALPHABETS)
                parts.append("".join(rng.choice(a) for _ in range(rng.randint(1, 8))))
        s = "".join(parts)
        out.append(s)
    return out


def variants(base):
    """tokenizer.json layouts other published Unigram tokenizers use, made
    from the converted one: the older hub layout of xlm-roberta-base and
    multilingual-e5 (Precompiled alone, WhitespaceSplit then Metaspace with
    add_prefix_space); prepend_scheme "first" without splitting, with
    Lowercase, Replace and RobertaProcessing; and byte fallback with the
    Llama-style decoder chain."""
    legacy = json.loads(json.dumps(base))
    legacy["normalizer"] = base["normalizer"]["normalizers"][0]
    meta = {"type": "Metaspace", "replacement": "\u2581", "add_prefix_space": True}
    legacy["pre_tokenizer"] = {"type": "Sequence",
                               "pretokenizers": [{"type": "WhitespaceSplit"}, meta]}
    legacy["decoder"] = dict(meta)
    yield "legacy", legacy, None

    first = json.loads(json.dumps(base))
    first["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Lowercase"},
        {"type": "Replace", "pattern": {"String": "ab"}, "content": "b\u00e4"},
        {"type": "Strip", "strip_left": True, "strip_right": False}]}
    first["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": "first", "split": False}
    first["post_processor"] = {"type": "RobertaProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0],
                               "trim_offsets": True, "add_prefix_space": True}
    first["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                        "prepend_scheme": "first", "split": False}
    # The Python binding reports character offsets, which cannot express the
    # byte offsets inside a multi-byte space that trim_offsets leaves (the
    # library takes a count of characters off byte offsets): texts with a
    # non-ASCII space are left out of this variant; test_tokenizer_unigram.c
    # checks that arithmetic on its own.
    yield "first", first, lambda text: any(c.isspace() and ord(c) > 0x7F for c in text)

    fb = json.loads(json.dumps(base))
    fb["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    fb["pre_tokenizer"] = None
    # Drop the pieces of a few common letters so that byte pieces are used.
    vocab = [v for v in base["model"]["vocab"] if v[0] not in ("\u2581a", "e", "\u0439", "\u7684")]
    vocab += [["<0x%02X>" % b, -20.0] for b in range(256)]
    fb["model"] = {"type": "Unigram", "unk_id": 3, "vocab": vocab, "byte_fallback": True}
    fb["added_tokens"] = [dict(a, id=len(vocab) - 256 - 1) if a["content"] == "<mask>" else a
                          for a in base["added_tokens"]]
    fb["post_processor"] = {"type": "TemplateProcessing",
                            "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}}],
                            "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                     {"Sequence": {"id": "B", "type_id": 1}}],
                            "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}}
    fb["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    yield "bytefallback", fb, None


def make_cases(tok, texts):
    tok.no_truncation()
    tok.no_padding()
    cases = []
    for text in texts:
        enc = tok.encode(text, add_special_tokens=True)
        cases.append({
            "text": text,
            "ids": enc.ids,
            "offsets": byte_offsets(text, enc.offsets),
            "special": enc.special_tokens_mask,
            "decoded": tok.decode(enc.ids, skip_special_tokens=True),
            "decoded_special": tok.decode(enc.ids, skip_special_tokens=False),
        })
    return cases


def main():
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    cases = make_cases(tok, CASES + random_strings(3000))
    golden_io.dump({"tokenizers_version": tokenizers.__version__,
                    "tokenizer": "tests/golden/xlmr-tiny/tokenizer.json",
                    "fixed_cases": len(CASES), "cases": cases}, OUT)
    print(OUT, len(cases), "cases")
    base = json.load(open(TOKENIZER, encoding="utf-8"))
    for name, tj, leave_out in variants(base):
        d = os.path.join(HERE, "unigram-" + name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        texts = [t for t in CASES + random_strings(1000, seed=len(name))
                 if not (leave_out and leave_out(t))]
        vcases = make_cases(tokenizers.Tokenizer.from_file(path), texts)
        golden_io.dump({"tokenizers_version": tokenizers.__version__,
                        "fixed_cases": len(CASES), "cases": vcases},
                       os.path.join(d, "cases.json.gz"))
        print(d, len(vcases), "cases")
    # The byte-level BPE (RoBERTa's layout): its offsets are trimmed by
    # RobertaProcessing, whose byte arithmetic the character offsets of the
    # Python binding cannot express for a multi-byte space (see "first").
    d = os.path.join(HERE, "roberta-tiny")
    texts = [t for t in CASES + random_strings(2000, seed=7)
             if not any(c.isspace() and ord(c) > 0x7F for c in t)]
    rcases = make_cases(tokenizers.Tokenizer.from_file(os.path.join(d, "tokenizer.json")), texts)
    golden_io.dump({"tokenizers_version": tokenizers.__version__,
                    "fixed_cases": len(CASES), "cases": rcases}, os.path.join(d, "cases.json.gz"))
    print(d, len(rcases), "cases")


if __name__ == "__main__":
    main()
