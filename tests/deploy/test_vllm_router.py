"""Two attnserve instances behind the vLLM project's router (PyPI
vllm-router, pinned in tests/deploy/run.sh), all on 127.0.0.1: embeddings
requests naming the model go through the router, both instances serve a
share, the vectors are the instance's own, and a model no instance serves
gets the instance's 404 back through the router.

What this router does with us, read from its source and seen here: it waits
for /health, forwards /v1/embeddings as it came (the `model` field picks no
worker in its regular mode: every worker must serve the model, and the
instance checks the name), and its power_of_two policy compares the two
workers' loads, polling GET /get_load for {"load": N}; we serve no such
route (a 404, which it ignores), so the load it compares is its own count of
requests in flight on each worker. The vLLM gauges on /metrics are what the
production stack's Python router scrapes; that router is not on PyPI (the
name vllm-router there is this one), so it is not started here."""
import concurrent.futures
import os
import re
import subprocess
import tempfile
import time

import pytest

from test_manifests import BIN, MODEL, ROOT, binary_serves, free_port

ROUTER_VERSION = "0.1.17"  # as tests/deploy/run.sh
MODEL_NAME = os.path.basename(MODEL)
REQUESTS = 40
CLIENTS = 4

# The launcher's own entry point (vllm_router.launch_router) also imports its
# Python debugging balancer and so fastapi, uvicorn and aiohttp; the Rust
# router it starts needs none of them. This is what it runs for the Rust one.
LAUNCH = r"""
import argparse, sys
from vllm_router.router import Router
from vllm_router.router_args import RouterArgs
from vllm_router.version import __version__
assert __version__ == sys.argv[1], __version__
parser = argparse.ArgumentParser()
RouterArgs.add_cli_args(parser)
args = RouterArgs.from_cli_args(parser.parse_args(sys.argv[2:]))
args._validate_router_args()
Router.from_args(args).start()
"""


def wait_until(what, cond, procs, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        for name, p, log in procs:
            if p.poll() is not None:
                log.seek(0)
                raise AssertionError("%s exited %s while waiting for %s:\n%s" % (
                    name, p.returncode, what, log.read()[-3000:]))
        try:
            if cond():
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        assert time.monotonic() < deadline, "%s not within %d s" % (what, timeout)
        time.sleep(0.2)


def served(requests, url):
    """Embeddings requests an instance answered 200, from its /metrics."""
    m = re.search(r'^attnserve_http_requests_total\{route="/v1/embeddings",status="200"\} (\S+)$',
                  requests.get(url + "/metrics", timeout=5).text, re.M)
    return int(float(m.group(1))) if m else 0


@pytest.fixture(scope="module")
def cluster():
    router_dir = os.environ.get("ATTNSERVE_DEPLOY_ROUTER_DIR")
    if not router_dir:
        pytest.fail("vllm-router not installed (tests/deploy/run.sh installs it)")
    if not binary_serves():
        pytest.fail("build/attnserve is not built: make first")
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.fail("no model: make model")
    import requests
    procs = []
    with tempfile.TemporaryDirectory() as d:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        urls = []
        try:
            for i in range(2):
                port = free_port()
                log = open(os.path.join(d, "attnserve-%d.log" % i), "w+")
                p = subprocess.Popen([BIN, "--host=127.0.0.1", "--port=%d" % port,
                                      "--model=%s" % MODEL, "--threads=1", "--codec_workers=1",
                                      "--plugin_dir=none"],
                                     stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
                procs.append(("attnserve %d" % i, p, log))
                urls.append("http://127.0.0.1:%d" % port)
            for u in urls:
                wait_until(u + " ready", lambda u=u: requests.get(
                    u + "/ready", timeout=1).status_code == 200, procs)
            port, metrics_port = free_port(), free_port()
            log = open(os.path.join(d, "router.log"), "w+")
            p = subprocess.Popen(
                ["/usr/bin/python3", "-c", LAUNCH, ROUTER_VERSION, "--host", "127.0.0.1",
                 "--port", str(port), "--worker-urls"] + urls
                + ["--policy", "power_of_two", "--prometheus-host", "127.0.0.1",
                   "--prometheus-port", str(metrics_port), "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, cwd=d,
                env=dict(env, PYTHONPATH=router_dir))
            procs.append(("vllm-router", p, log))
            router = "http://127.0.0.1:%d" % port
            wait_until("the router", lambda: requests.get(
                router + "/health", timeout=1).status_code == 200, procs)
            yield router, urls
        finally:
            for _, p, log in reversed(procs):
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                log.close()


def test_both_instances_serve_through_the_router(cluster):
    import requests
    router, urls = cluster
    before = [served(requests, u) for u in urls]
    want = requests.post(urls[0] + "/v1/embeddings", timeout=30,
                         json={"model": MODEL_NAME, "input": "through the router"}).json()

    def one(i):
        r = requests.post(router + "/v1/embeddings", timeout=60,
                          json={"model": MODEL_NAME, "input": ["through the router", "n%d" % i]})
        return r.status_code, r.json()
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        answers = list(pool.map(one, range(REQUESTS)))
    assert [s for s, _ in answers] == [200] * REQUESTS, [a for a in answers if a[0] != 200][:2]
    for _, body in answers:
        assert body["model"] == MODEL_NAME
        # The same binary and model on both: the instance's own vector, exactly.
        assert body["data"][0]["embedding"] == want["data"][0]["embedding"]
    after = [served(requests, u) for u in urls]
    shares = [a - b for a, b in zip(after, before)]
    # Only the router's requests reached the instances since `before`
    # (the direct one above went to the first instance).
    assert sum(shares) == REQUESTS + 1, shares
    shares[0] -= 1
    print("requests per instance through the router: %s" % shares)
    assert all(s > 0 for s in shares), "one instance served nothing: %s" % shares


def test_unknown_model_gets_the_instances_404(cluster):
    import requests
    router, _ = cluster
    r = requests.post(router + "/v1/embeddings", timeout=30,
                      json={"model": "no-such-model", "input": "x"})
    assert r.status_code == 404, (r.status_code, r.text)
    assert r.json()["error"]["code"] == "model_not_found", r.text
