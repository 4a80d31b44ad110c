#!/usr/bin/env python3
"""Writes tests/golden/tokenizer_cases.json.gz: token ids, tokens and byte offsets
that Hugging Face `tokenizers` gives for a corpus of hard strings, the reference
tests/unit/test_tokenizer.c compares model/tokenizer.c against.

Usage: python3 tests/golden/make_tokenizer_cases.py [MODEL_DIR]
(MODEL_DIR defaults to models/all-MiniLM-L6-v2; needs `pip install tokenizers`).
Truncation and padding stored in tokenizer.json are switched off: the cases
hold every token, and the C test truncates on its own.
"""
import os
import sys
import unicodedata

import tokenizers

import golden_io

LONG_WORD = "pneumonoultramicroscopicsilicovolcanoconiosis" * 3  # 135 chars

CASES = [
    # plain English and casing
    "", " ", "   \t\n  ", "Hello, world!", "hello world", "HELLO WORLD",
    "The quick brown fox jumps over the lazy dog.",
    "This is a test of the embedding service.",
    "Sentence-transformers map sentences to a 384-dimensional dense vector space.",
    "unaffable", "tokenization", "Transformers' self-attention is O(n^2).",
    "I can't believe it's not butter!", "e-mail, re-enter, co-operate",
    "MiXeD CaSe WoRdS", "a", "A", "I", "x y z",
    # accents and Latin extensions
    "café", "Café au lait", "naïve", "Ångström", "résumé", "crème brûlée",
    "São Paulo", "Zürich", "Kraków", "Ærøskøbing", "façade", "El Niño", "Dvořák",
    "Łódź", "İstanbul", "ıi İI", "STRASSE straße", "Maße", "ẞ", "ǅungla", "ﬁnance ﬂow",
    "Ⅻ ⅻ", "Ω ohm Ω", "Å Å Å", "ﬀ", "ĳ", "Œuvre", "ǰ", "ΐ",
    # combining sequences
    "cafe\u0301", "e\u0301\u0302\u0303", "a\u0308\u0304", "n\u0303o\u0303",
    "q\u0307\u0323", "\u0301\u0301 start", "z\u0335\u0321\u031b\u0337algo",
    "\U0001D16D\U0001D165 reorder", "a\U0001D165\U0001D16D\U0001D165b", "x\u0345\u0301y",
    "\u0f71\u0f72\u0f74", "\u05d1\u05bc\u05b7", "e\u200d\u0301",
    # Greek, Cyrillic, Armenian, Georgian
    "Καλημέρα κόσμε", "ΣΊΣΥΦΟΣ", "ἀρχή", "Ὀδυσσεύς", "Привет, мир!", "ЁЛКА ёлка",
    "Україна", "Բարև", "გამარჯობა",
    # RTL and Indic, Southeast Asian
    "مرحبا بالعالم", "اللُّغَةُ الْعَرَبِيَّة", "שָׁלוֹם עוֹלָם", "नमस्ते दुनिया", "हिन्दी",
    "বাংলা", "தமிழ்", "සිංහල", "สวัสดีชาวโลก", "ภาษาไทย", "ລາວ", "ភាសាខ្មែរ",
    "Tiếng Việt có dấu", "Xin chào",
    # CJK
    "你好，世界！", "我爱自然语言处理。", "北京大学", "中文English混合", "繁體中文測試",
    "日本語のテキストです。", "ひらがな カタカナ 漢字", "ｶﾀｶﾅ ＡＢＣ １２３", "東京タワー",
    "한국어 텍스트", "안녕하세요 세계", "ㄱㄴㄷ ㅏㅑ", "𠀀𠀁 𪜀 𫝀 𬺰", "〇一二三", "㐀㐁",
    "⺀⻳ ⼀", "豈 更", "。、「」『』", "ＫＡＴＡＫＡＮＡ",
    # emoji
    "I love pizza 🍕!", "😀😃😄", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag",
    "🇫🇷 🇯🇵", "❤️ heart", "🥰 new emoji", "✅ done ✔", "👩🏿‍💻", "🫠", "1️⃣ keycap",
    "☃ ☂ ★", "smile:)", "<3 ♥",
    # control characters, whitespace and invisible characters
    "tab\tseparated\tvalues", "line1\nline2\r\nline3", "nul\x00byte", "esc\x1b[0m",
    "bell\x07", "zero\u200bwidth", "bom\ufefffirst", "\ufeffstart", "soft\u00adhyphen",
    "non\u00a0breaking", "em\u2003space", "ideographic\u3000space", "line\u2028sep",
    "para\u2029sep", "\x1c\x1d\x1e\x1f file separators", "nel\x85line", "zwj\u200djoin",
    "zwnj\u200cjoin", "lrm\u200eand\u200frlm", "\ufffd replacement", "private \ue000 use",
    "del\x7fchar", "vtab\x0bff\x0c", "ogham\u1680space", "narrow\u202fnbsp",
    "mongolian\u180evowel", "word\u2060joiner", "tag\U000E0041", "\u0890\u0891 new Cf",
    # punctuation
    "!!!", "...", "?!?!", "--", "—em dash–en dash", "«guillemets»", "“curly” ‘quotes’",
    "¿Qué? ¡Sí!", "a.b.c", "(parens) [brackets] {braces}", "#hashtag @mention",
    "$100 €50 £30 ¥20", "50% off", "a/b\\c|d", "~tilde^caret`backtick", "§ ¶ † ‡",
    "…ellipsis", "‼ ⁉", "・", "၊။", "፡።", "؟،؛", "\u061d new Po", "\u2e43\u2e44 new",
    "\u166d chi rho", "\u2e42 old", "_under_score_", "***bold***", "a&b&&c", "'single'",
    # numbers
    "0", "123", "3.14159", "1,000,000", "2024-01-15", "12:30:45", "1e-10", "+1 (555) 123-4567",
    "٠١٢٣٤٥", "१२३", "①②③", "½ ¾", "x² y³", "0x1F 0b1010", "IPv4 192.168.0.1",
    # URLs, code and markup
    "https://www.example.com/path?query=1&b=2#frag", "mailto:user@example.org",
    "http://例子.测试/路径", "def f(x): return x**2", "for (int i = 0; i < n; ++i) { a[i] = 0; }",
    "<div class=\"x\">hi</div>", "{\"key\": [1, 2, 3]}", "SELECT * FROM t WHERE id=1;",
    "snake_case camelCase PascalCase", "$HOME/.bashrc", "C:\\Windows\\System32",
    "```python\nprint('hi')\n```", "# Heading\n- item", "a->b => c", "#include <stdio.h>",
    # long words and long text
    LONG_WORD, "x" * 100, "x" * 101, "é" * 100, "é" * 101, "a" * 99 + "." + "b" * 5,
    "supercalifragilisticexpialidocious", "Donaudampfschifffahrtsgesellschaftskapitän",
    "Rindfleischetikettierungsüberwachungsaufgabenübertragungsgesetz",
    "qwzxqwzxqwzx", "zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz", "ab" * 60,
    " ".join(["lorem ipsum dolor sit amet"] * 40),
    # added tokens written in the text
    "[CLS] inside [SEP] text", "[SEP][SEP]", "a[MASK]b", "[UNK]", "[PAD] padding",
    "[cls] lower", "[ SEP ]", "[SEP", "x[CLS]é",
    # mixed scripts
    "Hello 世界 مرحبا мир 🌍", "αβγ abc абв", "Café 東京 ☕", "naïve façade 日本",
    "English русский ελληνικά עברית हिन्दी ไทย", "ß ẞ ﬅ ﬆ", "Ǆ ǅ ǆ", "ꭰꮳꮧ Cherokee",
    "𝐁𝐨𝐥𝐝 𝑖𝑡𝑎𝑙𝑖𝑐", "Ⓒⓘⓡⓒⓛⓔ", "ᴬᴮᶜ", "ｆｕｌｌｗｉｄｔｈ", "\U00010d50 garay",
    "\U00016ea0 new upper", "\u1c89 lower", "ǅ" * 3, "\U000111c9 sharada", "\u1734 hanunoo",
    "\U00011938 dives", "\u1ac0 new mark", "a\u0300\u1ac0\u0301", "\U0001e000 glagolitic",
]


def byte_offsets(text, offsets):
    """The library reports character offsets; the C tokenizer gives bytes."""
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [[pos[a], pos[b]] for a, b in offsets]


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else "models/all-MiniLM-L6-v2"
    tok = tokenizers.Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    cases = []
    for text in CASES:
        enc = tok.encode(text)
        cases.append({"text": text, "ids": enc.ids, "tokens": enc.tokens,
                      "offsets": byte_offsets(text, enc.offsets)})
    doc = {
        "generator": "tests/golden/make_tokenizer_cases.py",
        "tokenizers_version": tokenizers.__version__,
        "python_unicodedata": unicodedata.unidata_version,
        "model": os.path.basename(os.path.normpath(model_dir)),
        "cases": cases,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "tokenizer_cases.json.gz")
    golden_io.dump(doc, path)
    print(f"{len(cases)} cases written to {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
