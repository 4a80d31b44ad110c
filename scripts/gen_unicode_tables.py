#!/usr/bin/env python3
"""Generates model/unicode_tables.c, the Unicode data the WordPiece tokenizer needs.

The tokenizer must give the ids of Hugging Face `tokenizers` (BertNormalizer +
BertPreTokenizer), so the tables must hold the character properties *as that
library sees them*. Its Rust code takes them from three sources of different
Unicode versions:

  * the `unicode_categories` 0.1.1 crate (Unicode 8.0 tables): control/format
    characters removed by clean_text (Cc, Cf, Co; not Cn), punctuation (P*)
    and nonspacing marks (Mn) dropped by strip_accents;
  * Rust's std (Unicode 16 in current releases): char::is_whitespace and
    char::to_lowercase;
  * the `unicode-normalization-alignments` crate: canonical decomposition (NFD).

Python's unicodedata (recorded below; 14.0 on Python 3.11) is the base of every
table. Because none of those sources is Python's version, this script then
measures every code point through the installed `tokenizers` library and keeps
the library's answer wherever the two differ, printing (and writing into the
generated header) how many code points each property changed and a sample. The
canonical combining classes used for reordering come from unicodedata alone:
the library does not expose them, and they are stable across versions.

Usage: python3 scripts/gen_unicode_tables.py > model/unicode_tables.c
(needs `pip install tokenizers`; the version used is recorded in the output).
"""
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers, pre_tokenizers

MAX_CP = 0x110000
HANGUL_S_BASE, HANGUL_S_COUNT = 0xAC00, 11172
ASCII_PUNCT = set('!"#$%&\'()*+,-./:;<=>?@[\\]^_`{|}~')

# Flag bits; model/unicode_tables.h carries the same values.
F_REMOVE = 1 << 0   # clean_text drops it (NUL, U+FFFD, control/format)
F_CLEAN_SPACE = 1 << 1  # clean_text turns it into ' '
F_WHITESPACE = 1 << 2   # BertPreTokenizer splits on it and drops it
F_PUNCT = 1 << 3        # BertPreTokenizer isolates it
F_CHINESE = 1 << 4      # handle_chinese_chars pads it with spaces
F_MN = 1 << 5           # strip_accents drops it (after NFD)


def python_props(c):
    """The properties as Python's unicodedata defines them."""
    cp = ord(c)
    cat = unicodedata.category(c)
    flags = 0
    if cp in (0, 0xFFFD) or (cat in ("Cc", "Cf", "Co") and c not in "\t\n\r"):
        flags |= F_REMOVE
    elif c in "\t\n\r" or (c.isspace() and cat in ("Zs", "Zl", "Zp", "Cc")):
        flags |= F_CLEAN_SPACE
    if c in "\t\n\r" or (c.isspace() and cat in ("Zs", "Zl", "Zp", "Cc")):
        flags |= F_WHITESPACE
    if cat.startswith("P") or c in ASCII_PUNCT:
        flags |= F_PUNCT
    nfd = unicodedata.normalize("NFD", c)
    if cat == "Mn" and nfd == c:
        flags |= F_MN
    return flags, nfd, c.lower()


class HfProbe:
    """Asks the tokenizers library how it treats one code point."""

    def __init__(self):
        N = normalizers.BertNormalizer
        self.clean = N(clean_text=True, handle_chinese_chars=False, strip_accents=False, lowercase=False)
        self.chinese = N(clean_text=False, handle_chinese_chars=True, strip_accents=False, lowercase=False)
        self.strip = N(clean_text=False, handle_chinese_chars=False, strip_accents=True, lowercase=False)
        self.lower = N(clean_text=False, handle_chinese_chars=False, strip_accents=False, lowercase=True)
        self.nfd = normalizers.NFD()
        self.pre = pre_tokenizers.BertPreTokenizer()

    def props(self, c):
        flags = 0
        cleaned = self.clean.normalize_str(c)
        if cleaned == "":
            flags |= F_REMOVE
        elif cleaned == " ":
            flags |= F_CLEAN_SPACE
        pieces = [p for p, _ in self.pre.pre_tokenize_str("a" + c + "a")]
        if pieces == ["a", "a"]:
            flags |= F_WHITESPACE
        elif pieces == ["a", c, "a"]:
            flags |= F_PUNCT
        if self.chinese.normalize_str(c) == " " + c + " ":
            flags |= F_CHINESE
        nfd = self.nfd.normalize_str(c)
        # Mn only matters for characters that NFD leaves alone: every
        # character strip_accents looks at has already been decomposed.
        if nfd == c and self.strip.normalize_str(c) == "":
            flags |= F_MN
        return flags, nfd, self.lower.normalize_str(c)


def main():
    hf = HfProbe()
    flag_names = {F_REMOVE: "remove", F_CLEAN_SPACE: "clean-space", F_WHITESPACE: "whitespace",
                  F_PUNCT: "punct", F_CHINESE: "chinese", F_MN: "Mn"}
    # handle_chinese_chars is a fixed list of ranges in the library, not a
    # Unicode property, so it is measured but not compared.
    diffs = {name: [] for name in list(flag_names.values()) + ["NFD", "lowercase"] if name != "chinese"}
    props = {}
    for cp in range(MAX_CP):
        if 0xD800 <= cp <= 0xDFFF:
            continue
        c = chr(cp)
        pf, pd, pl = python_props(c)
        hflags, hd, hl = hf.props(c)
        for bit, name in flag_names.items():
            if bit != F_CHINESE and (pf ^ hflags) & bit:
                diffs[name].append(cp)
        if pd != hd:
            diffs["NFD"].append(cp)
        if pl != hl:
            diffs["lowercase"].append(cp)
        if HANGUL_S_BASE <= cp < HANGUL_S_BASE + HANGUL_S_COUNT:
            # Decomposed arithmetically in C; check that the library agrees.
            s = cp - HANGUL_S_BASE
            alg = chr(0x1100 + s // 588) + chr(0x1161 + (s % 588) // 28)
            if s % 28:
                alg += chr(0x11A7 + s % 28)
            assert hd == alg, hex(cp)
            hd = c
        ccc = unicodedata.combining(c)
        # The streaming normalizer relies on these: a character that can be
        # reordered by NFD never splits words, and no decomposition or
        # lowercase mapping is longer than its fixed buffers.
        if ccc:
            assert not hflags & (F_WHITESPACE | F_PUNCT | F_CLEAN_SPACE | F_CHINESE), hex(cp)
        assert len(hd) <= 4 and len(hl) <= 3, hex(cp)
        dec = [] if hd == c else [ord(x) for x in hd]
        low = [] if hl == c else [ord(x) for x in hl]
        if hflags or ccc or dec or low:
            props[cp] = (hflags, ccc, tuple(dec), tuple(low))

    # Unique records; record 0 is "no property".
    records = [(0, 0, (), ())]
    rec_index = {records[0]: 0}
    pool = []
    pool_index = {}

    def pool_add(seq):
        if not seq:
            return 0
        if seq not in pool_index:
            pool_index[seq] = len(pool)
            pool.extend(seq)
        return pool_index[seq]

    cp_rec = {}
    for cp, rec in props.items():
        if rec not in rec_index:
            rec_index[rec] = len(records)
            records.append(rec)
        cp_rec[cp] = rec_index[rec]
    assert len(records) < 65536

    # Two-stage table: 256-entry blocks, identical blocks shared.
    blocks = []
    block_index = {}
    stage1 = []
    for hi in range(MAX_CP >> 8):
        blk = tuple(cp_rec.get((hi << 8) | lo, 0) for lo in range(256))
        if blk not in block_index:
            block_index[blk] = len(blocks)
            blocks.append(blk)
        stage1.append(block_index[blk])

    out = sys.stdout
    w = out.write
    w("/* unicode_tables.c — GENERATED by scripts/gen_unicode_tables.py; do not edit.\n")
    w(" *\n")
    w(f" * Base data: Python {sys.version.split()[0]} unicodedata, Unicode {unicodedata.unidata_version}.\n")
    w(f" * Calibrated against Hugging Face tokenizers {tokenizers.__version__}; code points where\n")
    w(" * the library's answer differs from that Unicode version (and which these tables\n")
    w(" * follow, see the script for why):\n")
    for name, cps in diffs.items():
        sample = " ".join(f"{x:04X}" for x in cps[:6])
        w(f" *   {name:12s} {len(cps):7d}{'  e.g. ' + sample if cps else ''}\n")
    w(f" * Canonical combining classes: Unicode {unicodedata.unidata_version}.\n")
    w(" */\n")
    w('#include "model/unicode_tables.h"\n\n')
    w(f"const uint16_t uni_stage1[{len(stage1)}] = {{\n")
    for i in range(0, len(stage1), 16):
        w("    " + ", ".join(str(x) for x in stage1[i:i + 16]) + ",\n")
    w("};\n\n")
    w(f"const uint16_t uni_stage2[{len(blocks)}][256] = {{\n")
    for blk in blocks:
        w("    {\n")
        for i in range(0, 256, 16):
            w("        " + ", ".join(str(x) for x in blk[i:i + 16]) + ",\n")
        w("    },\n")
    w("};\n\n")
    w(f"const uni_record uni_records[{len(records)}] = {{\n")
    for flags, ccc, dec, low in records:
        w(f"    {{{flags}, {ccc}, {len(dec)}, {len(low)}, {pool_add(dec)}, {pool_add(low)}}},\n")
    w("};\n\n")
    w(f"const uint32_t uni_pool[{max(len(pool), 1)}] = {{\n")
    for i in range(0, len(pool), 12):
        w("    " + ", ".join(f"0x{x:X}" for x in pool[i:i + 12]) + ",\n")
    if not pool:
        w("    0,\n")
    w("};\n")
    for name, cps in diffs.items():
        print(f"{name}: {len(cps)} code points follow tokenizers, not unicodedata", file=sys.stderr)
    print(f"{len(records)} records, {len(blocks)} blocks, {len(pool)} pool entries", file=sys.stderr)


if __name__ == "__main__":
    main()
