#!/usr/bin/env python3
"""Makes tests/golden/xlmr-tiny/: a tiny XLM-RoBERTa tokenizer built the way
the real ones were, so the Unigram tokenizer is tested on the real pieces;
and tests/golden/roberta-tiny/, a byte-level BPE in RoBERTa's layout.

A SentencePiece Unigram model is trained with the `nmt_nfkc` normalisation
rule on the multilingual paragraphs below, then `transformers` converts it to
tokenizer.json through XLMRobertaTokenizer (the same converter that made the
published XLM-R tokenizer.json files), so its Precompiled normalizer holds
SentencePiece's real nmt_nfkc charsmap.

Usage: build/venv-tok/bin/python tests/golden/make_unigram_tokenizer.py
(scripts/tok-venv.sh makes that environment: sentencepiece, transformers,
tokenizers from PyPI). The result is committed, so `make test` never needs
these packages; tests/golden/make_unigram_cases.py then writes the goldens.
"""
import os
import sys
import tempfile

import sentencepiece as spm
from tokenizers import AddedToken, ByteLevelBPETokenizer, processors
from transformers.convert_slow_tokenizer import XLMRobertaConverter

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "xlmr-tiny")

CORPUS = """\
The quick brown fox jumps over the lazy dog. Embeddings map sentences to vectors.
A document pipeline reads invoices, contracts and letters, and finds the nearest ones.
Retrieval pairs an embedder with a reranker; the reranker scores each query and passage.
Numbers like 3.14, 2024-05-01 and 1,000,000 appear in text, as do e-mail addresses.
Бързата кафява лисица прескача мързеливото куче. Документите се обработват в София.
Системата за търсене намира най-близките текстове и ги подрежда по сходство.
Българският език използва кирилица; думите са дълги и имат много окончания.
Nhlangano wa vanhu wu hlengeletana emugangeni. Vana va dyondza exikolweni siku na siku.
Ndzi tsakile ku mi vona. Xitsonga xi vulavuriwa eMozambique na le Afrika Dzonga.
Mati ya kona ya tenga, naswona tinyanyana ti yimbelela ensin'wini.
敏捷的棕色狐狸跳过了懒狗。文档处理系统在马普托和索非亚运行。
检索系统将查询与文档配对，并按相似度排序。中文没有空格分词。
الثعلب البني السريع يقفز فوق الكلب الكسول. تُعالَج الوثائق باللغة العربية أيضاً.
اللُّغَةُ الْعَرَبِيَّةُ جَمِيلَةٌ، وَالنُّصُوصُ طَوِيلَةٌ.
तेज़ भूरी लोमड़ी आलसी कुत्ते के ऊपर कूदती है। दस्तावेज़ों को हिंदी में भी खोजा जाता है।
नमस्ते दुनिया! भाषा का संसाधन कठिन है।
Emoji appear too: 😀 🍕 👍🏽 👨‍👩‍👧 🇧🇬 🇲🇿 ❤️ ✅ and they must survive.
Combining marks: cafe\u0301, nai\u0308ve, n\u0303, Ångström, résumé, crème brûlée, Dvořák, Łódź.
Full-width ＡＢＣ １２３ and ligatures ﬁ ﬂ are folded by NFKC; ½ becomes 1⁄2.
Tiếng Việt có dấu. Καλημέρα κόσμε. Привет, мир! Україна. 日本語のテキストです。한국어 텍스트.
"""


class SlowXLMR:
    """What the converter reads of a slow XLMRobertaTokenizer: the model
    file and the ids of its special tokens (fairseq's layout)."""

    def __init__(self, vocab_file):
        self.vocab_file = vocab_file
        self.add_prefix_space = True
        self.special_tokens = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
        sp = spm.SentencePieceProcessor(model_file=vocab_file)
        self.mask_id = sp.get_piece_size() + 1

    def convert_tokens_to_ids(self, token):
        return {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}.get(token, self.mask_id)


def main():
    os.makedirs(OUT, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        text = os.path.join(tmp, "corpus.txt")
        with open(text, "w", encoding="utf-8") as f:
            # Repeated lines make the counts large enough for the trainer.
            for _ in range(4):
                f.write(CORPUS)
        prefix = os.path.join(tmp, "spm")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=prefix, model_type="unigram", vocab_size=700,
            normalization_rule_name="nmt_nfkc", character_coverage=1.0,
            hard_vocab_limit=False, num_threads=1, seed_sentencepiece_size=100000,
            minloglevel=2)
        tok = XLMRobertaConverter(SlowXLMR(prefix + ".model")).converted()
    # The special tokens as the published XLM-R tokenizer.json files have
    # them: <mask> takes the whitespace before it (lstrip).
    tok.add_special_tokens([AddedToken(t, normalized=False, special=True)
                            for t in ("<s>", "<pad>", "</s>", "<unk>")])
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.save(os.path.join(OUT, "tokenizer.json"))
    print(OUT, tok.get_vocab_size())
    make_roberta()


def make_roberta():
    """A RoBERTa-style byte-level BPE trained by `tokenizers` on the same
    text, laid out as roberta-base's tokenizer.json (ByteLevel pre-tokenizer
    and decoder, RobertaProcessing, <mask> with lstrip)."""
    out = os.path.join(HERE, "roberta-tiny")
    os.makedirs(out, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    bpe.train_from_iterator(CORPUS.splitlines() * 4, vocab_size=1000, min_frequency=2,
                            special_tokens=specials, show_progress=False)
    tok = bpe._tokenizer
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0),
                                                      trim_offsets=True, add_prefix_space=False)
    tok.save(os.path.join(out, "tokenizer.json"))
    print(out, tok.get_vocab_size())


if __name__ == "__main__":
    sys.exit(main())
