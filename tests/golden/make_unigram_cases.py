#!/usr/bin/env python3
"""Writes tests/golden/unigram_cases.json: the ids, offsets and decoded text
Hugging Face `tokenizers` gives with tests/golden/xlmr-tiny/tokenizer.json
(made by make_unigram_tokenizer.py) for text in many scripts and for a few
thousand random strings; tests/unit/test_tokenizer_unigram.c compares
model/tok_unigram.c against it.

Usage: build/venv-tok/bin/python tests/golden/make_unigram_cases.py
(scripts/tok-venv.sh makes that environment).
"""
import json
import os
import random

import tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZER = os.path.join(HERE, "xlmr-tiny", "tokenizer.json")
OUT = os.path.join(HERE, "unigram_cases.json")

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


def byte_offsets(text, offsets):
    """The Python binding reports character offsets; the C tokenizer bytes."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def main():
    tok = tokenizers.Tokenizer.from_file(TOKENIZER)
    tok.no_truncation()
    tok.no_padding()
    cases = []
    for text in CASES + random_strings(3000):
        enc = tok.encode(text, add_special_tokens=True)
        cases.append({
            "text": text,
            "ids": enc.ids,
            "offsets": byte_offsets(text, enc.offsets),
            "decoded": tok.decode(enc.ids, skip_special_tokens=True),
            "decoded_special": tok.decode(enc.ids, skip_special_tokens=False),
        })
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump({"tokenizers_version": tokenizers.__version__,
                   "tokenizer": "tests/golden/xlmr-tiny/tokenizer.json",
                   "fixed_cases": len(CASES), "cases": cases}, f, ensure_ascii=True, indent=0)
    print(OUT, len(cases), "cases")


if __name__ == "__main__":
    main()
