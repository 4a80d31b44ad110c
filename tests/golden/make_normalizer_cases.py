#!/usr/bin/env python3
"""Writes tests/golden/unigram-{nfkc,nfc,nfd,nfkd}/{tokenizer.json,cases.json.gz}:
the tiny SentencePiece model of tests/golden/xlmr-tiny with a Unicode
normalizer in place of its Precompiled charsmap, and the ids, byte offsets
and decoded text Hugging Face `tokenizers` gives with each on text in many
scripts chosen for normalization (Bulgarian, Tsonga, Vietnamese, Hangul
syllables and conjoining jamo, Arabic presentation forms, full-width Latin,
ligatures, super- and subscripts, combining sequences out of canonical
order, emoji ZWJ sequences) and on random strings of such characters.
tests/unit/test_tokenizer_unigram.c compares model/tok_pipeline.c with them.

  nfkc  Sequence [NFKC, Replace " {2,}" -> " "]: what the SentencePiece
        converter writes for a model trained with the nmt_nfkc rule but
        without its charsmap, Metaspace pre-tokenizer;
  nfc   NFC alone;
  nfd   Sequence [NFD, Lowercase];
  nfkd  Sequence [NFKD, Strip both sides].

Usage: build/venv-tok/bin/python tests/golden/make_normalizer_cases.py
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
from make_unigram_cases import CASES, make_cases  # noqa: E402

TOKENIZER = os.path.join(HERE, "xlmr-tiny", "tokenizer.json")

NORMALIZATION_CASES = [
    # Bulgarian and Tsonga, precomposed and decomposed
    "Йо̀ан и́ска да ѝ помогне", "И\u0306о\u0300ан", "ѝ и\u0300 Ѝ", "Ѐ е\u0300",
    "Xitsonga: ŵ ŋ ṱ ṋ ḽ", "n\u0301wana ŋ\u0331", "Va\u0302na va\u0302 va\u0323",
    # Vietnamese: stacked marks in every order
    "Tiếng Việt có dấu", "Tie\u0302\u0301ng Vie\u0323\u0302t", "Vie\u0302\u0323t",
    "ệ e\u0323\u0302 e\u0302\u0323 ẹ\u0302", "Ở đâu? Ờ, ở đây.", "o\u031b\u0309 O\u031b\u0300",
    # Hangul: syllables, conjoining jamo, compatibility jamo, LV + T
    "한국어 텍스트", "\u1112\u1161\u11ab\u1100\u116e\u11a8", "\u1100\u1161", "가\u11a8",
    "가\u11a7", "\u1100\u1161\u11a8\u11a8", "ㄱㅏ ㄴ", "㈀ ㉠ ㉮", "ᄀ\u0301",
    # Arabic presentation forms and ligatures
    "ﻻ ﻵ ﷲ ﷺ ﷻ", "ﺍﻟﺴﻼﻡ ﻋﻠﻴﻜﻢ", "ﹰ ﹱ ﹲ", "ﭐ ﭑ ﮪ", "لاَ لأ لآ", "ﯪ ﰀ ﱞ ﳲ",
    # full-width and half-width, enclosed, squared
    "ＡＢＣ　ａｂｃ　１２３", "ｶﾞｷﾞ ﾊﾟ", "ｱｲｳｴｵ", "①②③ ⑴ ⒜ Ⓐ", "㍿ ㌀ ㎏ ㎞ ㏄",
    "🄰 🅐 🆎", "【ＦＵＬＬ】", "＂ｑｕｏｔｅ＂",
    # ligatures, super- and subscripts, fractions, letterlike
    "ﬁ ﬂ ﬀ ﬃ ﬄ ﬅ ﬆ", "Œ œ Æ æ Ĳ ĳ ǆ ǅ Ǆ", "x² y³ z⁴ H₂O CO₂", "ⁿ ᵃ ᵇ ₐ ₑ",
    "½ ⅓ ⅞ ↉ ⁄", "ℌ ℍ ℕ ℙ ℚ ℝ ℤ ℵ ℏ", "™ ℠ ℡ № ℅", "Ⅻ ⅻ Ⅳ", "… ‥ ‼ ⁇",
    "𝐀𝐁𝐂 𝑎𝑏𝑐 𝔄𝔅 𝟏𝟐𝟑", "ſt ẛ ẛ\u0323",
    # combining sequences: out of order, long, blocked, starting the text
    "a\u0301\u0323", "a\u0323\u0301", "a\u0328\u0301\u0323\u0302", "q\u0307\u0323",
    "\u0301\u0323 leading marks", "e\u0301\u0301\u0301", "A\u030a\u0301",
    "o\u0308\u0304 ȫ", "u\u0308\u0301 ǘ", "\u0344 \u0340\u0341 \u0343", "\u0f73 \u0f75 \u0f81",
    "z" + "\u0335\u0321\u031b\u0337\u0316\u0317" * 5, "a" + "\u0301\u0316" * 20,
    "\u0958 \u0929 \u09dc", "\u2126 \u212b \u2000 \u2001", "\u1e9b\u0323", "\u0387 \u037e",
    "e\u0301\u0327 ȩ\u0301 ḝ", "\u05b8\u05b7 \u05d0\u05b8", "\u0e40\u0e48 \u0e33",
    # emoji: ZWJ sequences, modifiers, keycaps, flags, variation selectors
    "👨‍👩‍👧‍👦 family", "🏳️‍🌈 🏴‍☠️", "👩🏽‍💻 👍🏿", "1️⃣ #️⃣ *️⃣", "🇧🇬🇲🇿",
    "❤️ ❤︎ ☺️", "🧑‍🤝‍🧑", "©️ ®️ ™️",
    # spaces normalizing to runs of spaces
    "a\u3000\u3000b", "x\u2003\u2002y", "\u00a0\u00a0nbsp", "tab\u3000 \u3000end",
]

ALPHABETS = [
    "aeiouAEIOU", "\u0300\u0301\u0302\u0303\u0308\u0323\u0327\u0328\u031b\u0316\u0345",
    "ăâêôơưđĂÂÊÔƠƯĐ", "ệếềểễộốồổỗợớờởỡựứừửữ",
    "\u1100\u1101\u1102\u1161\u1162\u1175\u11a8\u11a9\u11c2\u11a7", "가각한국어힣",
    "ﻻﻵﷲﺍﻟﺴﻼﻡﹰﭐ", "ＡＢＣａｂｃ１２３　ｶﾞﾊﾟ", "ﬁﬂﬃ²³₂½ℌ™…㍿①",
    "абвгдеёжзийѝЍ\u0306\u0300", "ŵŋṱṋḽ", " \t\u00a0\u2003", "👨👩👧\u200d🏽❤\ufe0f",
    "\u0958\u0929\u09dc\u0f73\u0344\u2126\u212b",
]


def random_strings(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 10)):
            r = rng.random()
            if r < 0.1:
                parts.append(chr(rng.randint(0xA0, 0x33FF)))
            elif r < 0.15:
                parts.append(chr(rng.choice([rng.randint(0xF900, 0xFFEF),
                                             rng.randint(0x1D400, 0x1D7FF)])))
            else:
                a = rng.choice(ALPHABETS)
                parts.append("".join(rng.choice(a) for _ in range(rng.randint(1, 8))))
        out.append("".join(parts))
    return out


def variants(base):
    spaces = {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}
    yield "nfkc", {"type": "Sequence", "normalizers": [{"type": "NFKC"}, spaces]}
    yield "nfc", {"type": "NFC"}
    yield "nfd", {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "Lowercase"}]}
    yield "nfkd", {"type": "Sequence", "normalizers": [
        {"type": "NFKD"}, {"type": "Strip", "strip_left": True, "strip_right": True}]}


def main():
    base = json.load(open(TOKENIZER, encoding="utf-8"))
    for name, normalizer in variants(base):
        tj = json.loads(json.dumps(base))
        tj["normalizer"] = normalizer
        d = os.path.join(HERE, "unigram-" + name)
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        texts = NORMALIZATION_CASES + CASES + random_strings(1500, seed=len(name) * 7)
        cases = make_cases(tokenizers.Tokenizer.from_file(path), texts)
        golden_io.dump({"tokenizers_version": tokenizers.__version__,
                        "fixed_cases": len(NORMALIZATION_CASES) + len(CASES), "cases": cases},
                       os.path.join(d, "cases.json.gz"))
        print(d, len(cases), "cases")


if __name__ == "__main__":
    main()
