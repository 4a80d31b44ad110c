"""Reads and writes the golden data of tests/golden.

Every golden a test reads (cases, vectors, scores) is compact JSON in UTF-8,
and the large ones are gzipped as NAME.json.gz: with one element per line
they made the tree too large to travel with a GPU bundle. The files the
service loads itself (tokenizer.json, config.json, weights in the model
directories) are not goldens and stay as their makers wrote them.

load() reads either form; dump() writes the form the path names, gzipped at
level 9 without a file name or time stamp so that regenerating the same data
gives the same bytes. Numbers keep the text Python writes for them (the
shortest that reads back to the same double), so every vector and score
reads back bit for bit."""
import gzip
import json


def load(path):
    """The JSON value in path, NAME.json or NAME.json.gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def dump(obj, path):
    """Writes obj to path as compact JSON, gzipped when path ends in .gz."""
    data = (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")
    if path.endswith(".gz"):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    with open(path, "wb") as f:
        f.write(data)
