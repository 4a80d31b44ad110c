"""Server-side chunking: `"chunking": {"max_tokens", "overlap", "document_vector"}`
on /v1/embeddings and /embed (server/api/embed_chunk.h).

Checked here, on the WordPiece model (all-MiniLM-L6-v2) and the Unigram one
(tests/golden/xlmr-tiny-model, which cuts inside words differently):
- each chunk's vector is the vector of its own text sent alone (cosine at
  least 1 - 1e-6: the same forward on the same ids, so only the batch's
  packing may change the rounding);
- offsets are byte offsets into the UTF-8 input, in order, slicing gives the
  chunk's text, consecutive chunks overlap by at most `overlap` tokens (and
  by at least one when overlap > 0), and together they cover every
  non-whitespace byte of the document;
- documents in several scripts (Bulgarian and Tsonga among them), with and
  without sentence punctuation, a single 100k-character word, whitespace-only
  stretches and a whitespace-only document, and a document that fits one
  window (one chunk, the plain request's vector);
- the document vector is the mean (or token-weighted mean) of the chunk
  vectors, normalised as the route normalises;
- the chunks run in the ordinary batches (one request, many batches);
- max_document_tokens (reloaded on SIGHUP) and the request-memory budget
  bound a document: 413 with the numbers, in each API's error shape."""
import concurrent.futures
import json
import math
import os
import socket
import time

import pytest
import requests

from conftest import JSON, ROOT, Server, assert_error, wait_for

XLMR_DIR = os.path.join(ROOT, "tests", "golden", "xlmr-tiny-model")
MIN_COSINE = 1.0 - 1e-6


def post(server, path, body, timeout=120):
    return requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=timeout)


def cosine(a, b):
    ab = sum(x * y for x, y in zip(a, b))
    return ab / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def chunked(server, path, doc, **chunking):
    """The chunks of one document and its document vector, whatever the route."""
    key = "input" if path == "/v1/embeddings" else "inputs"
    r = post(server, path, {key: doc, "chunking": chunking})
    assert r.status_code == 200, r.text[:400]
    item = r.json()["data"][0] if path == "/v1/embeddings" else r.json()[0]
    return item["chunks"], item["embedding"]


def plain(server, path, text):
    key = "input" if path == "/v1/embeddings" else "inputs"
    r = post(server, path, {key: text})
    assert r.status_code == 200, r.text[:400]
    return r.json()["data"][0]["embedding"] if path == "/v1/embeddings" else r.json()[0]


def spans(server, text):
    """/tokenize's byte spans of text's tokens (no special tokens)."""
    r = post(server, "/tokenize", {"inputs": text, "add_special_tokens": False})
    assert r.status_code == 200, r.text[:300]
    return [(t["start"], t["stop"]) for t in r.json()[0]]


def check_layout(server, doc, chunks, max_tokens, overlap):
    """Offsets in order, slices, overlap, coverage; returns the chunk texts."""
    raw = doc.encode("utf-8")
    toks = spans(server, doc)
    texts = []
    assert [c["index"] for c in chunks] == list(range(len(chunks)))
    covered = bytearray(len(raw))
    for i, c in enumerate(chunks):
        assert 0 <= c["start"] < c["stop"] <= len(raw), c
        assert 0 < c["tokens"] <= max_tokens, c
        texts.append(raw[c["start"]:c["stop"]].decode("utf-8"))  # whole characters
        for b in range(c["start"], c["stop"]):
            covered[b] = 1
        if i:
            prev = chunks[i - 1]
            assert prev["start"] < c["start"] and prev["stop"] < c["stop"], (prev, c)
            shared = sum(1 for s, e in toks if s >= c["start"] and e <= prev["stop"])
            if overlap:
                assert c["start"] < prev["stop"], (prev, c)
                assert 1 <= shared <= overlap, (prev, c, shared)
            else:
                assert c["start"] >= prev["stop"] and shared == 0, (prev, c)
    missing = [b for b in range(len(raw)) if not covered[b] and not chr(raw[b]).isspace()]
    # Multi-byte whitespace (U+3000, U+00A0) is outside chunks too: check by character.
    missing_chars = {raw[b:b + 4].decode("utf-8", "ignore")[:1] for b in missing}
    assert all(ch.isspace() or ch == "" for ch in missing_chars), (missing[:10], missing_chars)
    return texts


def check_alone(server, path, chunks, texts, sample=None):
    picks = range(len(chunks)) if sample is None else sorted(set(sample))
    for i in picks:
        alone = plain(server, path, texts[i])
        cos = cosine(alone, chunks[i]["embedding"])
        assert cos >= MIN_COSINE, (i, texts[i][:60], 1 - cos)


BULGARIAN = ("Българският език е индоевропейски език от групата на южнославянските езици. "
             "Той е официалният език на Република България и един от официалните езици на "
             "Европейския съюз. Книжовният език се основава на източните говори. ")
TSONGA = ("Xitsonga i ririmi leri vulavuriwaka hi vanhu va Vatsonga eAfrika-Dzonga, "
          "eMozambiki na le Zimbabwe. Ririmi leri ri ni marito yo tala lama humaka eka "
          "Xiputukezi na Xinghezi. Vana va dyondza ku hlaya na ku tsala hi Xitsonga exikolweni. ")
ENGLISH = ("The service's users process documents, and documents are longer than a model's "
           "window. Every client then writes its own splitter! Does it keep the offsets? "
           "Rarely; the link between a vector and its text is lost. ")
CHINESE = "文档比模型的窗口更长。每个客户端都要写自己的分割器。向量和文本之间的联系就丢失了！"
ARABIC = "المستندات أطول من نافذة النموذج. كل عميل يكتب أداة التقسيم الخاصة به. "
GREEK = "Τα έγγραφα είναι μεγαλύτερα από το παράθυρο του μοντέλου. Κάθε πελάτης γράφει τον δικό του. "

SCRIPTS = {
    "bulgarian": BULGARIAN * 6,
    "tsonga": TSONGA * 6,
    "english": ENGLISH * 6,
    "chinese": CHINESE * 8,
    "arabic": ARABIC * 8,
    "greek": GREEK * 6,
    "mixed": (BULGARIAN + CHINESE + TSONGA + ARABIC) * 2,
}


def no_punctuation(text):
    return "".join(" " if ch in ".,!?;'。！，" else ch for ch in text)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("chunk")), max_document_tokens=200000)
    yield s
    s.check_clean_exit(s.stop())


@pytest.fixture(scope="module")
def xlmr(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("chunk-xlmr")), model=XLMR_DIR)
    yield s
    s.check_clean_exit(s.stop())


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embed"])
@pytest.mark.parametrize("overlap", [0, 12])
def test_each_chunk_is_its_own_text_alone(minilm, path, overlap):
    doc = ENGLISH * 8
    chunks, vec = chunked(minilm, path, doc, max_tokens=48, overlap=overlap)
    assert len(chunks) >= 4
    texts = check_layout(minilm, doc, chunks, 48, overlap)
    check_alone(minilm, path, chunks, texts)
    # Whitespace is near in every window: no chunk ends inside a word.
    raw = doc.encode()
    assert all(raw[c["stop"]:c["stop"] + 1].isspace() for c in chunks[:-1])
    assert len(vec) == 384


def cpu_flags():
    return open("/proc/cpuinfo").read().split()


# Every engine, attention backend and precision the service offers (the
# default, fp32 fused, is the minilm fixture's): chunking happens before the
# engine, so each must give a chunk the vector of its text alone. The floor
# is the same as fp32's: a reduced precision changes the numbers of a
# forward, not their dependence on the batch a chunk lands in (bf16 and int8
# GEMMs and attention are computed row by row, with the same kernels for a
# chunk in a batch and alone).
ENGINE_SETTINGS = [
    ("naive", {"backend": "naive"}, None),
    ("bf16-attention", {"backend": "bf16"}, "avx512_bf16"),
    ("bf16", {"precision": "bf16", "backend": "fused"}, "avx512_bf16"),
    ("int8", {"precision": "int8", "backend": "fused"}, "avx512_vnni"),
    ("cpu-avx512", {"engine": "cpu-avx512", "backend": "fused"},
     "avx512f avx512dq avx512bw avx512vl"),
]


@pytest.mark.parametrize("name, settings, flag", ENGINE_SETTINGS,
                         ids=[e[0] for e in ENGINE_SETTINGS])
def test_each_chunk_is_its_own_text_alone_on_every_engine(start_server, name, settings, flag):
    lacks = [f for f in (flag or "").split() if f not in cpu_flags()]
    if lacks:
        pytest.skip("NOT RUN: this CPU lacks %s, which %s needs" % (" ".join(lacks), name))
    if settings.get("engine") == "cpu-avx512":
        settings = dict(settings, plugin_dir=os.path.join(os.path.dirname(
            os.environ["ATTNSERVE_BIN"]), "engines"))
    s = start_server(**settings)
    # The engine asked for is the one answering.
    r = requests.post(s.url("/embed"), headers=JSON, data=json.dumps({"inputs": "x"}), timeout=30)
    assert r.status_code == 200, r.text
    want = {"x-engine": settings.get("engine", "cpu"),
            "x-precision": settings.get("precision", "fp32"),
            "x-attention-backend": settings["backend"]}
    assert {k: r.headers.get(k) for k in want} == want
    doc = ENGLISH * 6
    for path in ("/v1/embeddings", "/embed"):
        chunks, _ = chunked(s, path, doc, max_tokens=48, overlap=8)
        assert len(chunks) >= 4
        check_alone(s, path, chunks, check_layout(s, doc, chunks, 48, 8))


def test_cut_at_sentences_when_one_is_in_reach(minilm):
    # No sentence here is longer than 24 tokens, the last quarter of a
    # 96-piece window: each chunk but the last ends with its sentence.
    doc = ENGLISH * 12
    chunks, _ = chunked(minilm, "/v1/embeddings", doc, max_tokens=98, overlap=10)
    texts = check_layout(minilm, doc, chunks, 98, 10)
    assert len(chunks) >= 3
    assert all(t[-1] in ".!?;" for t in texts[:-1]), [t[-20:] for t in texts]


@pytest.mark.parametrize("name", sorted(SCRIPTS))
@pytest.mark.parametrize("punctuation", [True, False])
def test_scripts(minilm, name, punctuation):
    doc = SCRIPTS[name] if punctuation else no_punctuation(SCRIPTS[name])
    chunks, _ = chunked(minilm, "/v1/embeddings", doc, max_tokens=40, overlap=6)
    assert len(chunks) >= 3, len(chunks)
    texts = check_layout(minilm, doc, chunks, 40, 6)
    check_alone(minilm, "/v1/embeddings", chunks, texts)


@pytest.mark.parametrize("name", ["bulgarian", "tsonga", "chinese", "mixed"])
@pytest.mark.parametrize("punctuation", [True, False])
def test_scripts_unigram(xlmr, name, punctuation):
    doc = SCRIPTS[name] if punctuation else no_punctuation(SCRIPTS[name])
    chunks, _ = chunked(xlmr, "/embed", doc, max_tokens=40, overlap=6)
    assert len(chunks) >= 3, len(chunks)
    texts = check_layout(xlmr, doc, chunks, 40, 6)
    check_alone(xlmr, "/embed", chunks, texts)


def test_a_100k_character_word(minilm, xlmr):
    word = "".join("abcdefghij"[(i * 7) % 10] for i in range(100000))
    # WordPiece: a word past max_input_chars_per_word is one [UNK]: one chunk,
    # the plain request's vector.
    chunks, vec = chunked(minilm, "/v1/embeddings", word, max_tokens=64)
    assert len(chunks) == 1 and (chunks[0]["start"], chunks[0]["stop"]) == (0, len(word))
    assert cosine(vec, plain(minilm, "/v1/embeddings", word)) >= MIN_COSINE
    # Unigram: thousands of pieces, cut between them (no boundary in reach),
    # each chunk re-tokenized alone.
    chunks, _ = chunked(xlmr, "/embed", word, max_tokens=64, overlap=4)
    assert len(chunks) > 100
    texts = check_layout(xlmr, word, chunks, 64, 4)
    check_alone(xlmr, "/embed", chunks, texts, sample=[0, 1, len(chunks) // 2, len(chunks) - 1])


def test_whitespace_stretches(minilm):
    doc = ("words before " + " " * 3000 + "\n\n\t\t" + "\u3000" * 50 + " words after. ") * 3 + \
        "tail " * 80
    chunks, _ = chunked(minilm, "/v1/embeddings", doc, max_tokens=24, overlap=3)
    texts = check_layout(minilm, doc, chunks, 24, 3)
    check_alone(minilm, "/v1/embeddings", chunks, texts)
    # Nothing but whitespace: one chunk, the whole text, as the plain request.
    blank = " \t\n" * 100
    chunks, vec = chunked(minilm, "/v1/embeddings", blank)
    assert len(chunks) == 1 and (chunks[0]["start"], chunks[0]["stop"]) == (0, len(blank))
    assert cosine(vec, plain(minilm, "/v1/embeddings", blank)) >= MIN_COSINE


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embed"])
def test_one_window_is_the_plain_request(minilm, path):
    doc = "  A document that fits in one window, with spaces around it.  "
    want = plain(minilm, path, doc)
    for dv in ("mean", "token_weighted"):
        chunks, vec = chunked(minilm, path, doc, document_vector=dv)
        assert len(chunks) == 1
        assert chunks[0]["start"] == 2 and chunks[0]["stop"] == len(doc) - 2
        assert chunks[0]["embedding"] == want and cosine(vec, want) >= MIN_COSINE
    chunks, vec = chunked(minilm, path, doc, document_vector="none")
    assert vec is None and chunks[0]["embedding"] == want


@pytest.mark.parametrize("path", ["/v1/embeddings", "/embed"])
def test_document_vector(minilm, path):
    doc = BULGARIAN * 4
    for dv in ("mean", "token_weighted"):
        chunks, vec = chunked(minilm, path, doc, max_tokens=50, overlap=5, document_vector=dv)
        w = [c["tokens"] if dv == "token_weighted" else 1 for c in chunks]
        want = [sum(wk * c["embedding"][j] for wk, c in zip(w, chunks)) / sum(w)
                for j in range(384)]
        norm = math.sqrt(sum(x * x for x in want))
        assert abs(math.sqrt(sum(x * x for x in vec)) - 1) < 1e-5  # unit, as the route's
        assert max(abs(a - b / norm) for a, b in zip(vec, want)) < 1e-5
    # /embed with normalize false: raw chunk vectors, their raw mean.
    r = post(minilm, "/embed", {"inputs": doc, "normalize": False,
                                "chunking": {"max_tokens": 50, "overlap": 5}})
    item = r.json()[0]
    want = [sum(c["embedding"][j] for c in item["chunks"]) / len(item["chunks"])
            for j in range(384)]
    assert max(abs(a - b) for a, b in zip(item["embedding"], want)) < 1e-5
    assert abs(math.sqrt(sum(x * x for x in item["chunks"][0]["embedding"])) - 1) > 1e-3


def test_several_documents_dimensions_and_base64(minilm):
    docs = [ENGLISH * 3, "short", TSONGA * 3]
    r = post(minilm, "/v1/embeddings", {"input": docs, "dimensions": 64, "chunking":
                                        {"max_tokens": 40}})
    assert r.status_code == 200, r.text[:300]
    body = r.json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    assert len(body["data"][1]["chunks"]) == 1
    assert body["usage"]["prompt_tokens"] == sum(c["tokens"] for d in body["data"]
                                                 for c in d["chunks"])
    for d in body["data"]:
        assert len(d["embedding"]) == 64
        assert all(len(c["embedding"]) == 64 for c in d["chunks"])
    b64 = post(minilm, "/v1/embeddings", {"input": docs, "encoding_format": "base64",
                                          "chunking": {"max_tokens": 40}}).json()
    assert isinstance(b64["data"][0]["embedding"], str)
    assert all(isinstance(c["embedding"], str) for c in b64["data"][2]["chunks"])


def test_chunks_run_in_the_ordinary_batches(start_server):
    # max_batch_requests 64: a document of ~200 chunks is at least 4 batches.
    s = start_server(max_batch_requests=64)
    doc = ENGLISH * 150
    b0 = s.metric("attnserve_batches_total")
    chunks, _ = chunked(s, "/v1/embeddings", doc, max_tokens=24)
    assert len(chunks) > 3 * 64
    assert s.metric("attnserve_batches_total") - b0 >= math.ceil(len(chunks) / 64)


def test_bounds_and_errors(start_server):
    s = start_server(max_document_tokens=100)
    doc = ENGLISH * 10  # about 450 tokens
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        err = assert_error(post(s, path, {key: doc, "chunking": {}}), 413)
        assert "max_document_tokens is 100" in err["message"], err
        assert "has %d tokens" % len(spans(s, doc)) in err["message"], err
        for bad, status in ((5, 400), ({"max_tokens": 2}, 422), ({"max_tokens": 257}, 422),
                            ({"max_tokens": 10, "overlap": 8}, 422), ({"overlap": -1}, 422),
                            ({"max_tokens": "64"}, 400), ({"document_vector": "max"}, 422),
                            ({"stride": 3}, 400)):
            assert_error(post(s, path, {key: "text", "chunking": bad}), status)
        assert_error(post(s, path, {key: [1, 2, 3], "chunking": {}}), 400)
        assert_error(post(s, path, {key: "", "chunking": {}}), 400)
    # Reloaded on SIGHUP.
    s.reload(max_document_tokens=100000)
    end = time.time() + 20
    while time.time() < end:
        r = post(s, "/embed", {"inputs": doc, "chunking": {"max_tokens": 64}})
        if r.status_code == 200:
            break
        time.sleep(0.2)
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("name", ["bert-cls-tiny", "xlmr-cls-tiny"])
def test_a_classifier_is_refused_chunked_or_not(start_server, name):
    # A classifier's forward answers logits: every embedding route refuses it
    # with 424, in its own shape, before it reads the chunking (so a chunking
    # it would refuse changes nothing).
    s = start_server(model=os.path.join(ROOT, "tests", "golden", name))
    for path, key in (("/v1/embeddings", "input"), ("/embeddings", "input"),
                      ("/embed", "inputs")):
        for chunking in (None, {}, {"max_tokens": 16, "overlap": 2}, {"overlap": 10 ** 6}):
            body = {key: "hello world"}
            if chunking is not None:
                body["chunking"] = chunking
            err = assert_error(post(s, path, body), 424)
            assert "not an embedding model" in err["message"], (path, chunking, err)
    assert requests.get(s.url("/health"), timeout=10).status_code == 200


@pytest.fixture(scope="module")
def eight_inputs(tmp_path_factory):
    s = Server(str(tmp_path_factory.mktemp("chunk-8")), max_inputs_per_request=8)
    yield s
    s.check_clean_exit(s.stop())


def test_overlap_is_at_most_half_a_window(eight_inputs):
    # max_tokens 34 less [CLS] and [SEP] is a window of 32: overlap 16 and no
    # more, so that each chunk moves at least a quarter window on.
    s = eight_inputs
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        r = post(s, path, {key: ENGLISH, "chunking": {"max_tokens": 34, "overlap": 16}})
        assert r.status_code == 200, r.text[:300]
        err = assert_error(
            post(s, path, {key: ENGLISH, "chunking": {"max_tokens": 34, "overlap": 17}}), 422)
        assert "chunking.overlap is 17" in err["message"] and ", 16" in err["message"], err


def test_chunks_number_at_most_max_inputs_per_request(eight_inputs):
    # Chunks are inputs: at most max_inputs_per_request of them, counted over
    # all the documents of the request, overlap or not.
    s = eight_inputs
    doc = ENGLISH * 10  # about 450 tokens, 15 windows of 32
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        r = post(s, path, {key: ENGLISH * 2, "chunking": {"max_tokens": 34, "overlap": 8}})
        assert r.status_code == 200, r.text[:300]
        assert len(r.json()["data"][0]["chunks"] if key == "input" else r.json()[0]["chunks"]) <= 8
        err = assert_error(post(s, path, {key: doc, "chunking": {"max_tokens": 34}}), 422)
        assert "more than 8 chunks" in err["message"], err
        assert "max_inputs_per_request is 8" in err["message"], err
        err = assert_error(
            post(s, path, {key: [ENGLISH * 2] * 4, "chunking": {"max_tokens": 34}}), 422)
        assert "more than 8 chunks" in err["message"], err
    assert post(s, "/embed", {"inputs": "still serving"}).status_code == 200


def test_memory_budget_bounds_a_document(start_server):
    # 1 MiB of budget holds a 120 kB body and its parse, not the token
    # arrays of the whole document (13 bytes a token): 413, the request
    # alone could never fit.
    s = start_server(max_request_memory_bytes=1 << 20, max_body_bytes=256 << 10)
    doc = ENGLISH * 600
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        err = assert_error(post(s, path, {key: doc, "chunking": {"max_tokens": 32}}), 413)
        assert "max_request_memory_bytes" in err["message"], err
    assert post(s, "/v1/embeddings", {"input": "still serving"}).status_code == 200


# ---- decoding on the codec workers (server/work/workpool.h) ----------------------------

WORKER_CASES = [
    ("/v1/embeddings", {"input": ["hello world", ENGLISH * 3]}),
    ("/v1/embeddings", {"input": ENGLISH * 6, "chunking": {"max_tokens": 40, "overlap": 4}}),
    ("/embeddings", {"input": "an Infinity client", "dimensions": 32}),
    ("/embed", {"inputs": [TSONGA, BULGARIAN], "normalize": False}),
    ("/embed", {"inputs": TSONGA * 5, "chunking": {"max_tokens": 30},
                "dimensions": 16}),
    # Refusals, in each route's shape.
    ("/embed", {"inputs": ""}),
    ("/v1/embeddings", {"input": "x", "chunking": {"max_tokens": 1}}),
    ("/v1/embeddings", {"input": ENGLISH * 40, "chunking": {}}),
    ("/embed", {"inputs": ENGLISH * 40, "chunking": {}}),
    ("/embed", {"inputs": "x", "truncate": "yes"}),
    ("/v1/embeddings", {"input": [[1, 2, 99999999]]}),
]


def test_many_workers_at_once_answer_as_one_does(start_server):
    """Every case sent three times at once to four codec workers gets what
    one worker, taking them one by one, answers: vectors, chunks, errors and
    their shapes (a worker's state leaking into another's request would
    show here). The deadline is far: under TSan (make tsan-http) the 33
    requests together take longer than the default 30 s."""
    one = start_server(codec_workers=1, max_document_tokens=1000, request_timeout_ms=600000)
    four = start_server(codec_workers=4, max_document_tokens=1000, request_timeout_ms=600000)
    want = [post(one, path, body) for path, body in WORKER_CASES]
    jobs = [(i, path, body) for i, (path, body) in enumerate(WORKER_CASES)] * 3
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(lambda j: (j[0], post(four, j[1], j[2])), jobs))
    for i, b in got:
        a = want[i]
        path, body = WORKER_CASES[i]
        assert a.status_code == b.status_code, (path, body, a.text[:200], b.text[:200])
        assert a.json() == b.json(), (path, a.text[:200], b.text[:200])
    # The budget refuses as before: 413 when the request alone could never
    # fit.
    small = start_server(codec_workers=2, max_request_memory_bytes=1 << 20,
                         max_body_bytes=256 << 10)
    err = assert_error(post(small, "/embed", {"inputs": ENGLISH * 600,
                                              "chunking": {"max_tokens": 32}}), 413)
    assert "max_request_memory_bytes" in err["message"]


def test_a_client_gone_during_tokenization(start_server):
    """A client that closes while its document waits for (or is in) its
    codec worker: nothing is computed for it and the server goes on."""
    s = start_server(codec_workers=1)
    body = json.dumps({"input": ENGLISH * 2000, "chunking": {"max_tokens": 64}}).encode()
    b0 = s.metric("attnserve_embedding_inputs_total")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", s.settings["port"])) as c:
            c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: "
                      b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
    r = post(s, "/v1/embeddings", {"input": "still serving"})
    assert r.status_code == 200
    # A document here is about 1600 chunks (some 100k tokens, 62 a chunk):
    # the three closed requests together computed less than one of them.
    assert s.metric("attnserve_embedding_inputs_total") - b0 < 1600


# ---- streaming: "stream": true, NDJSON ----------------------------------------------------


def streamed(server, path, body):
    r = requests.post(server.url(path), data=json.dumps(body), headers=JSON, timeout=120,
                      stream=True)
    assert r.status_code == 200, r.text[:300]
    assert r.headers["Content-Type"] == "application/x-ndjson"
    return [json.loads(line) for line in r.iter_lines() if line]


@pytest.mark.parametrize("path,key", [("/v1/embeddings", "input"), ("/embed", "inputs")])
def test_stream_is_the_unstreamed_answer_line_by_line(minilm, path, key):
    docs = [ENGLISH * 4, BULGARIAN * 2, "one window"]
    body = {key: docs, "chunking": {"max_tokens": 40, "overlap": 6}}
    whole = post(minilm, path, body)
    assert whole.status_code == 200, whole.text[:300]
    whole = whole.json()
    items = whole["data"] if key == "input" else whole
    lines = streamed(minilm, path, dict(body, stream=True))
    *chunk_lines, last = lines
    # One line per chunk, in order, then the documents' vectors and usage.
    want = [(d, c) for d, item in enumerate(items) for c in item["chunks"]]
    assert len(chunk_lines) == len(want) > 10
    for line, (d, c) in zip(chunk_lines, want):
        assert line["document"] == d
        for k in ("index", "start", "stop", "tokens"):
            assert line[k] == c[k], (line, c)
        assert cosine(line["embedding"], c["embedding"]) >= MIN_COSINE
    assert [x["index"] for x in last["data"]] == list(range(len(docs)))
    for x, item in zip(last["data"], items):
        assert x["chunks"] == len(item["chunks"])
        assert cosine(x["embedding"], item["embedding"]) >= MIN_COSINE
    if key == "input":
        assert last["usage"] == whole["usage"] and last["model"] == whole["model"]
    else:
        assert last["usage"]["prompt_tokens"] == sum(c["tokens"] for _, c in want)


def test_stream_needs_chunking_and_a_boolean(minilm):
    for path, key in (("/v1/embeddings", "input"), ("/embed", "inputs")):
        err = assert_error(post(minilm, path, {key: "text", "stream": True}), 422)
        assert "chunking" in err["message"], err
        assert_error(post(minilm, path, {key: "text", "chunking": {}, "stream": "yes"}), 400)
        r = post(minilm, path, {key: "text", "stream": False})
        assert r.status_code == 200, r.text[:300]


def test_stream_lines_come_before_the_last_batch_and_a_close_cancels(start_server):
    # Two 64-token chunks a batch: a document of some 140 chunks is some 70
    # batches, one piece in the queue at a time. The client reads the first
    # line and closes: had lines waited for the last batch, every chunk would
    # have been computed before that first line could be read. Instead the
    # rest is cancelled (counted) and far fewer chunks are computed.
    # (A deadline far off: a sanitizer build computes them slowly.)
    s = start_server(max_batch_requests=2, request_timeout_ms=600000)
    doc = ENGLISH * 200
    n_chunks = len(streamed(s, "/v1/embeddings", {"input": doc, "chunking": {"max_tokens": 64},
                                                  "stream": True})) - 1
    assert n_chunks > 100
    b0 = s.metric("attnserve_embedding_inputs_total")
    c0 = s.metric("attnserve_requests_cancelled_total")
    d0 = s.metric("attnserve_requests_dropped_total", reason="client_closed")
    body = json.dumps({"input": doc, "chunking": {"max_tokens": 64}, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", s.settings["port"]), timeout=60) as c:
        c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: "
                  b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        got, data = b"", b""
        while b"\n" not in data:  # the first line, out of the chunked transfer coding
            more = c.recv(65536)
            assert more, got
            got += more
            head, _, rest = got.partition(b"\r\n\r\n")
            data = b""
            while b"\r\n" in rest:
                size, _, tail = rest.partition(b"\r\n")
                n = int(size, 16)
                if len(tail) < n + 2:
                    break
                data, rest = data + tail[:n], tail[n + 2:]
        assert head.startswith(b"HTTP/1.1 200"), head
        first = json.loads(data.split(b"\n")[0])
        assert first["document"] == 0 and first["index"] == 0
    # Each counter waited for on its own: the cancel is counted on the
    # scheduler's thread, the drop after it when the connection ends.
    wait_for(lambda: s.metric("attnserve_requests_cancelled_total") != c0, timeout=30,
             what="the closed stream's request to be cancelled")
    assert s.metric("attnserve_requests_cancelled_total") == c0 + 1
    wait_for(lambda: s.metric("attnserve_requests_dropped_total", reason="client_closed") != d0,
             timeout=30, what="the dropped counter")
    assert s.metric("attnserve_requests_dropped_total", reason="client_closed") == d0 + 1
    assert s.metric("attnserve_embedding_inputs_total") - b0 < n_chunks
    assert post(s, "/v1/embeddings", {"input": "still serving"}).status_code == 200
