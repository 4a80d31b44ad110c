#!/usr/bin/env python3
"""Writes tests/golden/pair_cases.json.gz: what Hugging Face `tokenizers` gives
for a pair of texts (a query and a document, as a cross-encoder reads them):
ids, type ids, special-token mask and byte offsets, untruncated and truncated
with strategy longest_first (the library's default) to several maximum
lengths on either side. tests/unit/test_tokenizer_pair.c compares
tok_encode_pair with it, for each post-processor layout:

  minilm        models/all-MiniLM-L6-v2: WordPiece, TemplateProcessing
                [CLS] $A [SEP] $B:1 [SEP]:1 (BERT); the C test also reads the
                same cases with vocab.txt alone (transformers' BertTokenizer)
  xlmr          tests/golden/xlmr-tiny: Unigram, TemplateProcessing as
                transformers converts XLM-R: <s> $A </s> </s> $B </s>
  roberta       tests/golden/roberta-tiny: byte-level BPE, RobertaProcessing
                with trim_offsets
  first         tests/golden/unigram-first: RobertaProcessing, add_prefix_space
  bytefallback  tests/golden/unigram-bytefallback: a template whose pair
                ($A $B:1) has fewer special tokens than its single (<s> $A)
  bert          pair-bert/: BertProcessing on the Unigram model
  none          pair-none/: no post-processor (the texts back to back)
  mpnet, modernbert, qwen3, gemma3
                fam-*/ (make_family_tokenizers.py): MPNet's <s> $A </s> </s>
                $B:1 </s>:1 on WordPiece, [CLS] $A [SEP] $B:1 [SEP]:1 and
                $A <|endoftext|> $B:1 <|endoftext|>:1 on byte-level BPE,
                <bos> $A <eos> $B:1 <eos>:1 on the byte-fallback BPE
  bytelevel     fam-bytelevel/: Sequence of ByteLevel (trim_offsets) and
                $A <|endoftext|> $B:1 <|endoftext|>:1

Usage: build/venv-tok/bin/python tests/golden/make_pair_cases.py [MODEL_DIR]
(scripts/tok-venv.sh makes that environment; MODEL_DIR defaults to
models/all-MiniLM-L6-v2).
"""
import json
import os
import random
import sys

import tokenizers

import golden_io

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
OUT = os.path.join(HERE, "pair_cases.json.gz")

TEXTS = [
    "", " ", "what is the capital of France?", "Paris is the capital and largest city of France.",
    "The quick brown fox jumps over the lazy dog.", "HELLO   WORLD  ", "a",
    # Bulgarian, Tsonga
    "Къде се обработват документите?", "Документите се обработват в София.",
    "Бързата кафява лисица прескача мързеливото куче.",
    "Xana Xitsonga xi vulavuriwa kwihi?", "Ndzi tsakile ku mi vona. Xitsonga xi vulavuriwa eMozambique.",
    # Chinese, Japanese, Korean
    "检索系统如何排序？", "检索系统将查询与文档配对，并按相似度排序。", "日本語のテキストです。",
    "한국어 텍스트",
    # Arabic, Hebrew, Devanagari
    "ما هي عاصمة فرنسا؟", "الثعلب البني السريع يقفز فوق الكلب الكسول.", "שָׁלוֹם עוֹלָם",
    "तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है।",
    # emoji, combining marks, NFKC, invisible characters
    "😀 🍕 👍🏽", "👨‍👩‍👧 family", "cafe\u0301 nai\u0308ve", "ﬁ ﬂ ½ ＡＢＣ１２３",
    "zero\u200bwidth soft\u00adhyphen", "\x00nul\ttab\r\nline",
    # added tokens typed in the text
    "a <mask> b", "<s> and </s> in text", "[CLS] [SEP] [MASK] typed",
    # long ones, to be cut
    "Embeddings map sentences to vectors. " * 12,
    "Документите се обработват в София, " * 10, "敏捷的棕色狐狸跳过了懒狗。" * 8,
]

ALPHABETS = [
    "abcdefghijklmnopqrstuvwxyz ", "абвгдежзийклмнопрстуфхцчшщъьюя ", "敏捷的棕色狐狸跳过了懒狗文档",
    "الثعلببنيسريعيقفز ", "तेज़भूरीलोमड़ीआलसी ", "😀🍕👍🏽❤️🇧🇬 ", ".,;:!?'\"()- ", "ÀÉÎÕÜçñøåæ ",
]

# None: no truncation; else (max_length, direction).
LIMITS = [None, (512, "right"), (24, "right"), (24, "left"), (11, "right"), (11, "left"),
          (7, "right"), (6, "left"), (5, "right")]


def random_texts(n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a = rng.choice(ALPHABETS)
        out.append("".join(rng.choice(a) for _ in range(rng.randint(0, 60))))
    return out


def byte_offsets(texts, enc):
    """The binding's character offsets as bytes of the token's own text."""
    pos = []
    for t in texts:
        p = [0]
        for ch in t:
            p.append(p[-1] + len(ch.encode("utf-8")))
        pos.append(p)
    out = []
    for seq, (a, b) in zip(enc.sequence_ids, enc.offsets):
        out.append([0, 0] if seq is None else [pos[seq][a], pos[seq][b]])
    return out


def layouts(model_dir):
    yield "minilm", os.path.join(model_dir, "tokenizer.json"), None
    yield "xlmr", os.path.join(HERE, "xlmr-tiny", "tokenizer.json"), None
    # RobertaProcessing's trim_offsets counts characters off byte offsets,
    # which the binding's character offsets cannot express for a multi-byte
    # space: those texts are left out (make_unigram_cases.py does the same).
    multibyte_space = lambda t: any(c.isspace() and ord(c) > 0x7F for c in t)
    yield "roberta", os.path.join(HERE, "roberta-tiny", "tokenizer.json"), multibyte_space
    yield "first", os.path.join(HERE, "unigram-first", "tokenizer.json"), multibyte_space
    yield "bytefallback", os.path.join(HERE, "unigram-bytefallback", "tokenizer.json"), None
    base = json.load(open(os.path.join(HERE, "unigram-first", "tokenizer.json"), encoding="utf-8"))
    for name, pp in (("bert", {"type": "BertProcessing", "sep": ["</s>", 2], "cls": ["<s>", 0]}),
                     ("none", None)):
        d = os.path.join(HERE, "pair-" + name)
        os.makedirs(d, exist_ok=True)
        tj = dict(base, post_processor=pp)
        path = os.path.join(d, "tokenizer.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False)
        yield name, path, multibyte_space
    for name in ("mpnet", "modernbert", "qwen3", "gemma3"):
        yield name, os.path.join(HERE, "fam-" + name, "tokenizer.json"), None
    yield "bytelevel", os.path.join(HERE, "fam-bytelevel", "tokenizer.json"), multibyte_space


def make_cases(tok, pairs):
    tok.no_padding()
    cases = []
    for i, (a, b) in enumerate(pairs):
        limit = LIMITS[i % len(LIMITS)]
        if limit is None:
            tok.no_truncation()
        else:
            tok.enable_truncation(limit[0], strategy="longest_first", direction=limit[1])
        try:
            enc = tok.encode(a, b, add_special_tokens=True)
        except Exception as e:  # max_length below the special tokens
            cases.append({"a": a, "b": b, "max_length": limit[0], "direction": limit[1],
                          "error": str(e)})
            continue
        cases.append({
            "a": a, "b": b,
            "max_length": None if limit is None else limit[0],
            "direction": None if limit is None else limit[1],
            "ids": enc.ids, "type_ids": enc.type_ids, "special": enc.special_tokens_mask,
            "offsets": byte_offsets((a, b), enc),
        })
    return cases


def main():
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
    rng = random.Random(42)
    texts = TEXTS + random_texts(60, 3)
    pairs = [(rng.choice(texts), rng.choice(texts)) for _ in range(900)]
    pairs += [(a, b) for a in TEXTS[:6] for b in TEXTS[:6]]
    out = {"tokenizers_version": tokenizers.__version__, "layouts": {}}
    for name, path, leave_out in layouts(model_dir):
        tok = tokenizers.Tokenizer.from_file(path)
        use = [(a, b) for a, b in pairs if not (leave_out and (leave_out(a) or leave_out(b)))]
        out["layouts"][name] = make_cases(tok, use)
        print(name, len(use), "pairs")
    golden_io.dump(out, OUT)


if __name__ == "__main__":
    main()
