#!/usr/bin/env python3
"""splitters.py — server-side chunking against LangChain's splitters plus plain
requests: throughput and chunk quality side by side (make bench-chunk).

The same documents (--docs, default 100, of 5,000 to 50,000 characters:
generated English paragraphs with a fixed seed) are embedded three ways,
against one attnserve started here, interleaved round by round:

- server: POST /v1/embeddings with `"chunking": {"max_tokens": 256,
  "overlap": 32}`, --per-request documents a request;
- recursive: LangChain's RecursiveCharacterTextSplitter, its length measured
  in this model's tokens (from_huggingface_tokenizer: 254 pieces, the window
  less [CLS] and [SEP], 32 overlapping), then the chunk texts as plain
  requests of up to 64 inputs;
- token: LangChain's SentenceTransformersTokenTextSplitter (254 tokens a
  chunk, 32 overlapping: cut every 222 tokens whatever the text), then plain
  requests the same way.

Throughput is documents (and characters) a second, splitting included.
Quality: a cut (the end of a chunk that is not the document's end, or the
start of one that is not its beginning) "splits a word" when the characters
on both sides of it are letters or digits; with the tokens per chunk and the
chunks per document.

The LangChain packages go into the benchmark venv
(~/.cache/attnserve/bench-embed/venv, or $ATTNSERVE_BENCH_VENV) on first run:
langchain-text-splitters, with transformers and sentence-transformers already
there for bench/embed/peers.py (installed here too when missing).

    python3 bench/chunk/splitters.py build/attnserve [--docs 100] [--rounds 1]
"""
import argparse
import json
import os
import random
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import http.client

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
PACKAGES = ["langchain-text-splitters==1.1.3", "sentence-transformers", "transformers"]
IMPORTS = "import langchain_text_splitters, transformers, sentence_transformers"
MAX_TOKENS, OVERLAP = 256, 32
PIECES = MAX_TOKENS - 2


def default_venv():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.environ.get("ATTNSERVE_BENCH_VENV") or os.path.join(
        base, "attnserve", "bench-embed", "venv")


def ensure_venv(venv):
    """The venv's python, with PACKAGES installed (pip) when an import fails."""
    py = os.path.join(venv, "bin", "python")
    if os.path.exists(py) and subprocess.run([py, "-c", IMPORTS],
                                             capture_output=True).returncode == 0:
        return py
    print("bench-chunk: installing %s into %s (pip; first run only)" % (" ".join(PACKAGES), venv),
          file=sys.stderr)
    if not os.path.exists(py):
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    subprocess.run([py, "-m", "pip", "install", "-q"] + PACKAGES, check=True, stdout=sys.stderr)
    subprocess.run([py, "-c", IMPORTS], check=True)
    return py


WORDS = ("the service users process documents and every client writes its own splitter "
         "vector text offsets window model tokens batch queue answer request thread latency "
         "health long short sentence paragraph retrieval embedding chunk boundary overlap "
         "throughput quality measured kernel attention encoder transformer multilingual "
         "wordpiece unigram normalisation truncation deadline budget memory").split()


def documents(n, seed=14):
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        size = rng.randint(5000, 50000)
        paras, total = [], 0
        while total < size:
            sents = []
            for _ in range(rng.randint(2, 8)):
                words = [rng.choice(WORDS) for _ in range(rng.randint(5, 30))]
                if rng.random() < 0.1:  # a long compound, as technical text has
                    words.insert(rng.randrange(len(words)), "".join(rng.sample(WORDS, 4)))
                sents.append(" ".join(words).capitalize() + rng.choice([".", ".", ".", "?", "!"]))
            para = " ".join(sents)
            paras.append(para)
            total += len(para) + 2
        docs.append("\n\n".join(paras)[:size].rstrip())
    return docs


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, binary, workdir):
        self.port = free_port()
        cfg = {"host": "127.0.0.1", "port": self.port, "model": MODEL,
               "max_body_bytes": 16 << 20, "max_request_memory_bytes": 1 << 30,
               "request_timeout_ms": 3600000, "log_level": "warn"}
        path = os.path.join(workdir, "bench-chunk.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        self.log = open(path + ".log", "w")
        self.proc = subprocess.Popen([binary, "--config", path], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        end = time.time() + 120
        while time.time() < end:
            try:
                if self.post_get("/ready") == 200:
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("attnserve did not become ready")

    def post_get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        c.request("GET", path)
        return c.getresponse().status

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=3600)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError("%s: %d %s" % (path, r.status, data[:300]))
        return json.loads(data)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=120)
        self.log.close()


WORDCH = re.compile(r"\w")


def splits_word(doc, at):
    """Whether a cut at character at falls between two word characters."""
    return 0 < at < len(doc) and bool(WORDCH.match(doc[at - 1])) and bool(WORDCH.match(doc[at]))


def embed_texts(server, texts, batch=64):
    for i in range(0, len(texts), batch):
        server.post("/v1/embeddings", {"input": texts[i:i + batch]})


def run_server(server, docs, per_request):
    cuts = []
    tokens = []
    for i in range(0, len(docs), per_request):
        part = docs[i:i + per_request]
        ans = server.post("/v1/embeddings", {"input": part, "chunking": {
            "max_tokens": MAX_TOKENS, "overlap": OVERLAP, "document_vector": "mean"}})
        for doc, item in zip(part, ans["data"]):
            raw = doc.encode("utf-8")
            for c in item["chunks"]:
                # byte offsets to character offsets
                start = len(raw[:c["start"]].decode("utf-8"))
                stop = len(raw[:c["stop"]].decode("utf-8"))
                cuts += [(doc, start), (doc, stop)]
                tokens.append(c["tokens"])
    return cuts, tokens


def make_recursive(tokenizer):
    from langchain_text_splitters import RecursiveCharacterTextSplitter
    return RecursiveCharacterTextSplitter.from_huggingface_tokenizer(
        tokenizer, chunk_size=PIECES, chunk_overlap=OVERLAP, add_start_index=True)


def make_token():
    from langchain_text_splitters import SentenceTransformersTokenTextSplitter
    return SentenceTransformersTokenTextSplitter(model_name=MODEL, tokens_per_chunk=PIECES,
                                                 chunk_overlap=OVERLAP)


def run_recursive(server, docs, tokenizer, sp):
    cuts, texts = [], []
    for doc in docs:
        for d in sp.create_documents([doc]):
            start = d.metadata["start_index"]
            cuts += [(doc, start), (doc, start + len(d.page_content))]
            texts.append(d.page_content)
    embed_texts(server, texts)
    return cuts, [len(tokenizer.tokenize(t)) + 2 for t in texts]


def run_token(server, docs, tokenizer, sp):
    texts, cuts = [], []
    for doc in docs:
        chunks = sp.split_text(doc)
        texts += chunks
        # The splitter decodes token ids back to text (lower-cased, spaced),
        # so its cuts are found from the tokens: a cut before a "##" piece is
        # inside a word.
        pieces = tokenizer.tokenize(doc)
        step = PIECES - OVERLAP
        for start in range(0, len(pieces), step):
            end = min(start + PIECES, len(pieces))
            for at in (start, end):
                cuts.append(("##", 0 < at < len(pieces) and pieces[at].startswith("##")))
            if end == len(pieces):
                break
    embed_texts(server, texts)
    return cuts, [len(tokenizer.tokenize(t)) + 2 for t in texts]


def quality(cuts):
    inner = [c for c in cuts if c[0] == "##" or 0 < c[1] < len(c[0])]
    split = sum(1 for c in inner if (c[1] if c[0] == "##" else splits_word(c[0], c[1])))
    return len(inner), split


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--per-request", type=int, default=10)
    ap.add_argument("--venv", default=default_venv())
    args = ap.parse_args()
    if os.path.realpath(sys.prefix) != os.path.realpath(args.venv):
        py = ensure_venv(args.venv)
        os.execv(py, [py] + sys.argv)
    from transformers import AutoTokenizer
    tokenizer = AutoTokenizer.from_pretrained(MODEL)
    docs = documents(args.docs)
    chars = sum(len(d) for d in docs)
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print("documents: %d, %d to %d characters, %d in all" % (
        len(docs), min(map(len, docs)), max(map(len, docs)), chars))
    # The splitters are made once, outside the timing (the token splitter
    # loads the model).
    recursive, token = make_recursive(tokenizer), make_token()
    variants = {
        "server": lambda s: run_server(s, docs, args.per_request),
        "recursive": lambda s: run_recursive(s, docs, tokenizer, recursive),
        "token": lambda s: run_token(s, docs, tokenizer, token),
    }
    times = {k: [] for k in variants}
    stats = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(os.path.abspath(args.binary), tmp)
        try:
            server.post("/v1/embeddings", {"input": "warm up"})
            for rnd in range(args.rounds):
                order = list(variants) if rnd % 2 == 0 else list(reversed(variants))
                for name in order:
                    t0 = time.perf_counter()
                    cuts, tokens = variants[name](server)
                    dt = time.perf_counter() - t0
                    times[name].append(dt)
                    stats[name] = (quality(cuts), tokens)
                    print("round %d %-9s %.1fs  %d chunks" % (rnd, name, dt, len(tokens)),
                          flush=True)
        finally:
            server.stop()
    print("\n| variant | chunks | tokens a chunk (median) | cuts inside a word | docs/s | "
          "chars/s | time (median s) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name in variants:
        (n_cuts, split), tokens = stats[name]
        t = statistics.median(times[name])
        print("| %s | %d | %d | %d of %d (%.1f%%) | %.2f | %.0f | %.1f |" % (
            name, len(tokens), statistics.median(tokens), split, n_cuts,
            100.0 * split / max(1, n_cuts), len(docs) / t, chars / t, t))
    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())


if __name__ == "__main__":
    sys.exit(main())
