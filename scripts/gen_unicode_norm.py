#!/usr/bin/env python3
"""Generates model/unicode_norm.c, the data of the NFC, NFD, NFKC and NFKD
normalizers of the Unigram/BPE pipeline (model/tok_pipeline.c).

Hugging Face `tokenizers` normalizes with the `unicode-normalization-alignments`
crate 0.1.12, whose tables are Unicode 9.0.0. Python's unicodedata, the base
here, is a later version (14.0.0 on Python 3.11; the version used is written
into the output). So every table is measured through the installed
`tokenizers` and the library's answer kept wherever the two differ:

  * combining classes: a code point with a class in Python that the library
    does not reorder (probed next to U+0301, class 230, and U+0345, class
    240) gets class 0 — characters assigned after Unicode 9.0;
  * decompositions: the crate's tables are full (recursive) mappings, the
    canonical one and the compatibility one (compatibility, else canonical,
    at every step); a code point whose NFD/NFKD through the library is
    itself keeps no mapping, and a mapping the library spells differently
    is taken from the library;
  * compositions: a primary composite (a, b) -> c of Python's data is kept
    only when the library's NFC of a b is c.

The code points that follow the library rather than unicodedata are counted
and listed in the generated file's head comment. Hangul syllables are
decomposed and composed arithmetically by the C code, as by the crate.

Usage: python3 scripts/gen_unicode_norm.py > model/unicode_norm.c
(needs `pip install tokenizers`; scripts/tok-venv.sh makes such a venv).
"""
import sys
import unicodedata

import tokenizers
from tokenizers import normalizers

MAX_CP = 0x110000
S_BASE, S_COUNT = 0xAC00, 11172


def is_hangul(cp):
    return S_BASE <= cp < S_BASE + S_COUNT


def skip(cp):
    return 0xD800 <= cp <= 0xDFFF or is_hangul(cp)


def raw_mapping(cp):
    """(compat, [code points]) of UnicodeData's field 5, or None."""
    d = unicodedata.decomposition(chr(cp))
    if not d:
        return None
    parts = d.split()
    compat = parts[0].startswith("<")
    if compat:
        parts = parts[1:]
    return compat, [int(x, 16) for x in parts]


def full(cp, compat):
    """The crate's fully decomposed mapping: recursive, in mapping order."""
    m = raw_mapping(cp)
    if m is None or (m[0] and not compat):
        return [cp]
    out = []
    for x in m[1]:
        out.extend(full(x, compat))
    return out


def main():
    lib = {
        "NFD": normalizers.NFD(),
        "NFKD": normalizers.NFKD(),
        "NFC": normalizers.NFC(),
    }
    diffs = {"ccc": [], "canonical": [], "compatibility": [], "composition": []}

    # Combining classes as the library reorders them.
    ccc = {}
    for cp in range(MAX_CP):
        if skip(cp):
            continue
        c = unicodedata.combining(chr(cp))
        if not c:
            continue
        probe = 0x0301 if c < 230 else 0x0345
        if c >= 240 and cp != 0x0345:
            probe = None
        if probe is not None and cp != probe:
            s = chr(probe) + chr(cp)
            if lib["NFD"].normalize_str(s) == s:
                diffs["ccc"].append(cp)
                continue
        ccc[cp] = c

    def lib_sorted(seq):
        """Canonical reordering (stable by class) with the library's classes."""
        out, run = [], []
        for x in seq:
            if ccc.get(x, 0) == 0:
                out.extend(sorted(run, key=lambda y: ccc[y]))
                run = []
                out.append(x)
            else:
                run.append(x)
        out.extend(sorted(run, key=lambda y: ccc[y]))
        return out

    tables = {"canonical": {}, "compatibility": {}}
    for name, form, compat in (("canonical", "NFD", False), ("compatibility", "NFKD", True)):
        for cp in range(0x80, MAX_CP):
            if skip(cp):
                continue
            m = raw_mapping(cp)
            if m is None or (m[0] and not compat):
                continue
            mine = full(cp, compat)
            got = [ord(x) for x in lib[form].normalize_str(chr(cp))]
            if got == [cp]:
                diffs[name].append(cp)
                continue
            if got != lib_sorted(mine):
                diffs[name].append(cp)
                mine = got
            tables[name][cp] = mine
    # The crate looks the compatibility table up first and falls back to the
    # canonical one: keep in it only what differs.
    compat_only = {
        cp: d for cp, d in tables["compatibility"].items() if tables["canonical"].get(cp) != d
    }

    comps = []
    for cp in range(0x80, MAX_CP):
        if skip(cp):
            continue
        m = raw_mapping(cp)
        if m is None or m[0] or len(m[1]) != 2:
            continue
        a, b = m[1]
        if unicodedata.normalize("NFC", chr(a) + chr(b)) != chr(cp):
            continue
        if lib["NFC"].normalize_str(chr(a) + chr(b)) != chr(cp):
            diffs["composition"].append(cp)
            continue
        comps.append((a, b, cp))
    comps.sort()

    pool = []

    def pool_add(seq):
        # model/unicode_norm.h stores a decomposition as a uint16_t offset
        # into uni_norm_pool and a uint8_t length: a table that outgrew them
        # would wrap silently in the C initializers, so refuse to write it.
        at = len(pool)
        assert at + len(seq) <= 0xFFFF + 1, f"uni_norm_pool past uint16_t offsets ({at + len(seq)})"
        assert len(seq) <= 0xFF, f"a decomposition of {len(seq)} code points past uint8_t length"
        pool.extend(seq)
        return at

    w = sys.stdout.write
    w("/* unicode_norm.c — GENERATED by scripts/gen_unicode_norm.py; do not edit.\n")
    w(f" * Python {sys.version.split()[0]}, unicodedata {unicodedata.unidata_version},\n")
    w(f" * measured through tokenizers {tokenizers.__version__} (Unicode 9.0.0 tables).\n")
    w(" * Code points that follow the library, not unicodedata:\n")
    for name, cps in diffs.items():
        w(f" *   {name}: {len(cps)}")
        if cps:
            sample = " ".join(f"U+{x:04X}" for x in cps[:12])
            w(f" ({sample}{' ...' if len(cps) > 12 else ''})")
        w("\n")
    w(" */\n")
    w('#include "model/unicode_norm.h"\n\n')
    w(f"const uni_norm_class uni_norm_classes[{len(ccc)}] = {{\n")
    items = sorted(ccc.items())
    for i in range(0, len(items), 6):
        w("    " + " ".join(f"{{0x{c:X}, {k}}}," for c, k in items[i:i + 6]) + "\n")
    w("};\n")
    w(f"const size_t uni_norm_n_classes = {len(ccc)};\n\n")
    for name, table in (("canonical", tables["canonical"]), ("compat", compat_only)):
        entries = sorted(table.items())
        w(f"const uni_norm_map uni_norm_{name}[{len(entries)}] = {{\n")
        for i in range(0, len(entries), 4):
            row = []
            for cp, d in entries[i:i + 4]:
                row.append(f"{{0x{cp:X}, {pool_add(d)}, {len(d)}}},")
            w("    " + " ".join(row) + "\n")
        w("};\n")
        w(f"const size_t uni_norm_n_{name} = {len(entries)};\n\n")
    w(f"const uni_norm_pair uni_norm_compositions[{len(comps)}] = {{\n")
    for i in range(0, len(comps), 4):
        w("    " + " ".join(f"{{0x{a:X}, 0x{b:X}, 0x{c:X}}}," for a, b, c in comps[i:i + 4]) + "\n")
    w("};\n")
    w(f"const size_t uni_norm_n_compositions = {len(comps)};\n\n")
    w(f"const uint32_t uni_norm_pool[{len(pool)}] = {{\n")
    for i in range(0, len(pool), 10):
        w("    " + " ".join(f"0x{x:X}," for x in pool[i:i + 10]) + "\n")
    w("};\n")
    longest = max(len(d) for t in tables.values() for d in t.values())
    print(f"longest decomposition {longest}", file=sys.stderr)
    for name, cps in diffs.items():
        print(f"{name}: {len(cps)} code points follow tokenizers", file=sys.stderr)


if __name__ == "__main__":
    main()
