#!/usr/bin/env python3
"""Writes the raw seed inputs of every fuzz target into OUT/<target>/.

Seeds come from the end-to-end tests' request bodies (tests/e2e/), the
tokenizer cases (tests/golden/tokenizer_cases.json.gz and unigram_cases.json.gz), the real model's
safetensors header (shapes cut down so the file stays small and valid) and
config/attnserve.json. `make fuzz-seeds` runs this and folds the result into
tests/fuzz/corpus/ with libFuzzer's -merge=1, which keeps only inputs that
add coverage. Usage: make_seeds.py OUT [MODEL_DIR]"""
import base64
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "golden"))
import golden_io  # noqa: E402  (tests/golden/golden_io.py)

OUT = sys.argv[1]
MODEL = sys.argv[2] if len(sys.argv) > 2 else "models/all-MiniLM-L6-v2"
seeds = {t: [] for t in ("attention", "embeddings", "embed", "tokenize", "tokenizer",
                         "tokenizer_unigram", "tokenizer_bpe",
                         "tokenizer_normalizers", "tokenizer_split", "tokenizer_families",
                         "safetensors", "config")}


def add(target, data):
    seeds[target].append(data if isinstance(data, bytes) else data.encode())


def body(obj):
    return json.dumps(obj).encode()


texts = [c["text"] for c in golden_io.load("tests/golden/tokenizer_cases.json.gz")["cases"]]

# ---- bodies every JSON target shares (tests/e2e/test_errors.py) ----
common = [b"{", b"", b"[1, 2]", b'{"q": [}', b"nul", b'{"q": NaN}', b'{"q": Infinity}',
          b'{"q": 1e999}', b'{"a": 1, "a": 2}', b'{"q": "\\u0000"}', b'{"q": "\xff"}',
          b"[" * 70 + b"]" * 70, b'{"a": ' + b"[" * 64 + b"]" * 64 + b"}"]
for t in ("attention", "embeddings", "embed", "tokenize"):
    for b in common:
        add(t, b)

# ---- /v1/attention ----
def floats_b64(vals):
    return base64.b64encode(struct.pack("<%df" % len(vals), *vals)).decode()


small = {"q": [[[1, 0]], [[0, 1]]], "k": [[[1, 0]], [[0, 1]]], "v": [[[1, 2]], [[3, 4]]]}
add("attention", body(small))
add("attention", body(dict(small, causal=True)))
add("attention", body(dict(small, causal=1)))
shape = [3, 2, 4]
vals = [0.5 * i - 3 for i in range(24)]
enc = {"shape": shape, "data": floats_b64(vals)}
add("attention", body({"q": enc, "k": enc, "v": enc}))
add("attention", body({"q": enc, "k": enc, "v": enc, "causal": False}))
add("attention", body({"q": {"shape": shape, "data": floats_b64(vals)[:-4]}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": shape}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": [3, 2, 4.5], "data": ""}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": shape, "data": "!" * 128}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": [0, 2, 4], "data": ""}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": [-1, 2, 4], "data": ""}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": [1 << 40, 1, 1], "data": "AAAA"}, "k": enc, "v": enc}))
add("attention", body({"q": {"shape": [1, 1, 1], "data": "AACAfw=="}, "k": enc, "v": enc}))
add("attention", body({"k": small["k"], "v": small["v"]}))
add("attention", body({"q": [[[1, 0]]], "k": small["k"], "v": small["v"]}))
add("attention", body({"q": [[[1, 0], [1]]], "k": [[[1, 0], [1]]], "v": [[[1, 0], [1]]]}))
add("attention", body({"q": [], "k": [], "v": []}))
add("attention", body({"q": [[[1e39]]], "k": [[[1]]], "v": [[[1]]]}))
add("attention", body({"q": [[["x"]]], "k": [[[1]]], "v": [[[1]]]}))
add("attention", body({"q": small["q"], "k": small["k"], "v": small["v"], "extra": 1}))
add("attention", body({"q": [[[0.0] * 256] * 128], "k": [[[0.0] * 256] * 128],
                       "v": [[[0.0] * 256] * 128]})[:20000])

# ---- /v1/embeddings, /embed, /tokenize ----
openai = [{"input": "Hello, world!"}, {"input": ["Hello, world!", "Bonjour"],
                                       "model": "all-MiniLM-L6-v2"},
          {"input": [101, 7592, 102]}, {"input": [[101, 7592, 102], [101, 102]]},
          {"input": "a", "encoding_format": "base64", "dimensions": 8},
          {"input": "a", "encoding_format": "float", "user": "u"},
          {"input": 5}, {"input": {"text": "a"}}, {"input": ["a", 3]}, {"input": [1.5, 2]},
          {"input": [[101, "x"]]}, {"input": "a", "model": 3}, {"input": "a", "dimensions": "3"},
          {"input": "a", "encoding_format": 1}, {"input": "a", "temperature": 1},
          {"input": "a", "dimensions": 0}, {"input": "a", "dimensions": 385},
          {"input": "a", "encoding_format": "int8"}, {"input": [101, 30522, 102]},
          {"input": [[101, -1, 102]]}, {"input": [[7592] * 513]}, {"input": ""}, {"input": []},
          {"input": [""]}, {"input": ["a"] * 300}, {"input": "word " * 600}]
for o in openai:
    add("embeddings", body(o))
add("embeddings", b'{"input": "caf\xe9"}')
add("embeddings", b'{"input": "a\\u0000b"}')

tei = [{"inputs": "Hello, world!"}, {"inputs": ["Hello, world!"], "normalize": True},
       {"inputs": "x", "normalize": False}, {"inputs": "word " * 600, "truncate": True},
       {"inputs": "word " * 600, "truncate": False}, {"inputs": [["a"]]}, {"inputs": [101, 102]},
       {"inputs": "a", "normalize": "yes"}, {"inputs": "a", "truncate": 1}, {"input": "a"},
       {"inputs": ["a"] * 70}, {"inputs": ""}, {"inputs": []}]
for o in tei:
    add("embed", body(o))
add("embed", b'{"inputs": "caf\xe9"}')

tok = [{"inputs": "H\u00e9llo!", "add_special_tokens": True},
       {"inputs": ["Hello", "[CLS] x [SEP]"], "add_special_tokens": False},
       {"inputs": 3}, {"inputs": "a", "add_special_tokens": "no"}, {"inputs": "a", "x": 1},
       {"inputs": "word " * 600}]
for o in tok:
    add("tokenize", body(o))
add("tokenize", b'{"inputs": "caf\xe9"}')

# Every tokenizer case, one request per route in groups, and alone for the tokenizer
# (its first byte picks truncation and capacity: 0x0f is 512 tokens, truncating).
for i in range(0, len(texts), 8):
    group = [t for t in texts[i:i + 8] if t]
    if group:
        add("embed", body({"inputs": group}))
        add("embeddings", body({"input": group}))
        add("tokenize", body({"inputs": group}))
for t in texts:
    for flags in (b"\x0f", b"\x0c", b"\x05"):
        add("tokenizer", flags + t.encode("utf-8", "surrogatepass"))
for raw in (b"caf\xe9", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"a\x00b",
            b"\xe2\x82", "\u0301" * 40 + "e", "[CLS][SEP][UNK][MASK][PAD]", "a" * 300,
            "supercalifragilisticexpialidocious" * 4):
    add("tokenizer", b"\x0f" + (raw if isinstance(raw, bytes) else raw.encode()))

# The Unigram tokenizer's chosen cases (tests/golden/unigram_cases.json.gz: the
# multilingual, combining-mark, whitespace and added-token texts) and broken UTF-8.
ug = golden_io.load("tests/golden/unigram_cases.json.gz")
for target in ("tokenizer_unigram", "tokenizer_bpe"):
    for c in ug["cases"][:ug["fixed_cases"]]:
        for flags in (b"\x0f", b"\x05"):
            add(target, flags + c["text"].encode("utf-8", "surrogatepass"))
    for raw in (b"caf\xe9", b"\xed\xa0\x80", b"a <mask>\xc3", "\u0301" * 40 + "e",
                "  <mask>  <s></s>", "\r\n" * 20, "\ufb01\u0301" * 10, "a \u2003 b  c\t\td",
                "it's we're they'll I'd 've", "x" * 400):
        add(target, b"\x0f" + (raw if isinstance(raw, bytes) else raw.encode()))

# The normalizer and Split targets: their first byte picks the tokenizer
# (4 normalizer variants, 12 Split ones), then the flags byte and the text,
# from those variants' own chosen cases.
for target, names in (("tokenizer_normalizers", ["nfkc", "nfc", "nfd", "nfkd"]),
                      ("tokenizer_split", ["removed", "isolated", "previous", "next",
                                           "contiguous", "invert", "empty", "anchors",
                                           "literal", "gpt2", "llama3", "o200k"])):
    for pick, name in enumerate(names):
        d = ("tests/golden/unigram-" if target == "tokenizer_normalizers"
             else "tests/golden/split-") + name
        cases = golden_io.load(d + "/cases.json.gz")["cases"]
        for c in cases[:120]:
            add(target, bytes([pick, 0x0F]) + c["text"].encode("utf-8", "surrogatepass"))
        for raw in (b"caf\xe9", "\u0301" * 40 + "e", "\ufdfa" * 20, "\u1100\u1161\u11a8" * 9,
                    "\r\n" * 20 + "x", "x" * 400):
            add(target, bytes([pick, 0x05]) + (raw if isinstance(raw, bytes) else raw.encode()))

# The families target: its first byte picks the tokenizer (tests/golden/fam-*),
# then the flags byte and the text, from each layout's cases (the added-token
# texts among them) and texts for byte fallback and runs of added tokens.
for pick, name in enumerate(["mpnet", "modernbert", "qwen3", "gemma3", "flags", "bytelevel"]):
    cases = golden_io.load("tests/golden/fam-" + name + "/cases.json.gz")["cases"]
    for c in cases[:160]:
        add("tokenizer_families", bytes([pick, 0x0F]) + c["text"].encode("utf-8", "surrogatepass"))
    for raw in (b"caf\xe9", "\U00013000\ua66e\u4e0c" * 8, "  " * 30 + "[MASK]",
                "[R]" + " " * 20 + "[L]", "word" * 50, "e\u0301" * 30, "<mask>" * 20,
                "x" * 400):
        add("tokenizer_families", bytes([pick, 0x05]) + (raw if isinstance(raw, bytes)
                                                          else raw.encode()))


# ---- safetensors: the real header with every dimension cut to <= 2 ----
def st_file(header, data):
    h = json.dumps(header, separators=(",", ":")).encode()
    return struct.pack("<Q", len(h)) + h + data


with open(os.path.join(MODEL, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    real = json.loads(f.read(n))
sizes = {"F32": 4, "F16": 2, "BF16": 2, "F64": 8, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
         "U8": 1, "BOOL": 1}
small_h, off = {}, 0
for name, d in real.items():
    if name == "__metadata__":
        small_h[name] = d
        continue
    shp = [min(x, 2) for x in d["shape"]]
    nb = sizes[d["dtype"]]
    for x in shp:
        nb *= x
    small_h[name] = {"dtype": d["dtype"], "shape": shp, "data_offsets": [off, off + nb]}
    off += nb
add("safetensors", st_file(small_h, bytes(range(256)) * (off // 256) + bytes(off % 256)))
w = {"__metadata__": {"format": "pt"},
     "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
     "b": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
     "ids": {"dtype": "I64", "shape": [1], "data_offsets": [24, 32]},
     "e": {"dtype": "F16", "shape": [0, 5], "data_offsets": [32, 32]}}
add("safetensors", st_file(w, bytes(32)))
for dt in sizes:
    add("safetensors", st_file({"s": {"dtype": dt, "shape": [], "data_offsets": [0, sizes[dt]]}},
                               bytes(sizes[dt])))
add("safetensors", st_file({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                            "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}, bytes(6)))
add("safetensors", st_file({"a": {"dtype": "F32", "shape": [1, 1, 1, 1, 1, 1, 1, 1, 1],
                                  "data_offsets": [0, 4]}}, bytes(4)))
add("safetensors", st_file({"a": {"dtype": "F32", "shape": [1 << 62, 4],
                                  "data_offsets": [0, 4]}}, bytes(4)))
add("safetensors", struct.pack("<Q", 1 << 40) + b"{}")
add("safetensors", struct.pack("<Q", 100) + b"{}")
add("safetensors", b"\x02\x00\x00")

# ---- config: the shipped file, then flags and environment after NULs ----
shipped = open("config/attnserve.json", "rb").read()
add("config", shipped)
add("config", b"{}")
add("config", b'{"port": 8080.5}')
add("config", b'{"port": "8080"}')
add("config", b'{"backend": "fast", "verify_sample_rate": 2}')
add("config", b'{"fallback_backends": "fused,,naive"}')
add("config", b'{"api_key": "x"}')
add("config", b'{"max_batch_tokns": 1}')
add("config", b'{"host": "a\\u0001b"}')
add("config", b"[]")
add("config", b"{}\0--port=9000\0--max-batch-tokens\0" b"512\0--truncate\0false")
add("config", b"{}\0--truncate\0--log-level=debug\0--print-config")
add("config", b"{}\0--help")
add("config", b"{}\0--version")
add("config", b"{}\0--api-key=secret")
add("config", b"{}\0--port")
add("config", b"{}\0port=1")
add("config", b"{}\0ATTNSERVE_PORT=9001\0ATTNSERVE_TRUNCATE=off\0ATTNSERVE_VERIFY_SAMPLE_RATE=0.5")
add("config", b"{}\0ATTNSERVE_THREADS= 4\0ATTNSERVE_MAX_QUEUE=99999999999999999999")
add("config", shipped + b"\0--backend=naive\0ATTNSERVE_LOG_FORMAT=json")

for target, items in seeds.items():
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    for i, data in enumerate(items):
        with open(os.path.join(d, "seed-%04d" % i), "wb") as f:
            f.write(data)
    print("%s: %d seeds" % (target, len(items)))
