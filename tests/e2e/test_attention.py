"""POST /v1/attention against a float64 reference, in both encodings, for
every backend; answers come back in the encoding of the request."""
import pytest
import requests

from conftest import (as_base64, attention_case, from_base64, max_abs_diff, post_attention,
                      random_tensor)

TOL = 2e-5

SHAPES = [(1, 1, 1), (5, 2, 8), (17, 3, 16), (33, 4, 64), (9, 1, 256)]


@pytest.fixture(scope="module", params=["naive", "fused"])
def backend_server(request, tmp_path_factory):
    from conftest import Server
    s = Server(str(tmp_path_factory.mktemp(request.param)), backend=request.param)
    yield s
    s.check_clean_exit(s.stop())


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_nested_arrays_match_reference(backend_server, shape, causal):
    body, want = attention_case(hash(shape) & 0xffff, *shape, causal=causal)
    r = post_attention(backend_server, body)
    assert r.status_code == 200, r.text
    got = r.json()
    assert got["backend"] == backend_server.settings["backend"]
    assert r.headers["x-attention-backend"] == got["backend"]
    assert max_abs_diff(got["output"], want) < TOL


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("shape", SHAPES)
def test_base64_matches_reference(backend_server, shape, causal):
    body, want = attention_case(7 + (hash(shape) & 0xffff), *shape, causal=causal)
    r = post_attention(backend_server, as_base64(body))
    assert r.status_code == 200, r.text
    out = r.json()["output"]
    assert set(out) == {"shape", "data"} and out["shape"] == list(shape)
    assert max_abs_diff(from_base64(out), want) < TOL


def test_mixed_encodings_answer_in_the_encoding_of_q(backend_server):
    body, want = attention_case(11, 4, 2, 8)
    mixed = dict(body, k=as_base64(body)["k"])
    r = post_attention(backend_server, mixed)
    assert r.status_code == 200 and isinstance(r.json()["output"], list)
    assert max_abs_diff(r.json()["output"], want) < TOL
    mixed = dict(as_base64(body), v=body["v"])
    r = post_attention(backend_server, mixed)
    assert max_abs_diff(from_base64(r.json()["output"]), want) < TOL


def test_integers_and_large_values(backend_server):
    import random
    rng = random.Random(3)
    q = [[[rng.randint(-3, 3) for _ in range(4)]] for _ in range(6)]
    k = random_tensor(rng, 6, 1, 4, scale=30.0)  # large scores: the max must be subtracted
    v = random_tensor(rng, 6, 1, 4)
    from conftest import attention_ref
    r = post_attention(backend_server, {"q": q, "k": k, "v": v})
    assert r.status_code == 200, r.text
    assert max_abs_diff(r.json()["output"], attention_ref(q, k, v)) < 1e-4


def test_timing_headers_are_reported(backend_server):
    body, _ = attention_case(5, 8, 2, 8)
    r = post_attention(backend_server, body)
    assert float(r.headers["x-queue-time-ms"]) >= 0
    assert float(r.headers["x-inference-time-ms"]) > 0
    m = requests.get(backend_server.url("/metrics"), timeout=5).text
    name = backend_server.settings["backend"]
    assert 'attnserve_attention_kernel_calls_total{backend="%s"}' % name in m
