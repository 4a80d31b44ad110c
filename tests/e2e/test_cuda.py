"""The cuda engine plugin (build/gpu-engines/cuda.so, `make cuda`; e2e builds
it wherever nvcc is) end to end on a machine without a GPU: asked for by
name the service stops with status 2 and the reason; with the plugin present
`auto` keeps a CPU engine, and /info lists the plugin as refused with its
reason. Where the plugin was not built these tests are skipped, NOT RUN;
where a GPU is (the plugin is offered) the refusal tests are skipped and
tests/gpu/run.sh is the check."""
import json
import os
import subprocess

import pytest
import requests

import conftest
from conftest import MODEL_DIR, free_port

PLUGIN_DIR = os.path.join(os.path.dirname(conftest.BIN), "gpu-engines")
BUILT = os.path.exists(os.path.join(PLUGIN_DIR, "cuda.so"))
pytestmark = pytest.mark.skipif(not BUILT, reason="NOT RUN: %s/cuda.so was not built "
                                "(no nvcc here; `make cuda` builds it)" % PLUGIN_DIR)
NO_DEVICE = "no CUDA device"


def run_bin(tmp_path, *flags):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1,
                               "model": MODEL_DIR, "max_batch_tokens": 1024}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([conftest.BIN, "--config", str(cfg)] + list(flags),
                          capture_output=True, text=True, timeout=120, env=env)


def listed(s):
    r = requests.get(s.url("/info"), timeout=5)
    assert r.status_code == 200, r.text
    i = r.json()["engine"]
    return i, {e["name"]: e for e in i["engines"]}


def test_auto_keeps_a_cpu_engine_and_lists_cuda_refused(start_server):
    s = start_server(plugin_dir=PLUGIN_DIR)
    i, by_name = listed(s)
    cuda = by_name["cuda"]
    assert cuda["origin"].endswith("gpu-engines/cuda.so")
    if cuda["offered"]:
        pytest.skip("NOT RUN: a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert i["name"] == "cpu"
    assert NO_DEVICE in cuda["reason"] or "compute capability" in cuda["reason"], cuda
    assert "engine refused engine=cuda" in s.log_text()


def test_engine_cuda_stops_the_start_with_the_reason(tmp_path):
    p = run_bin(tmp_path, "--plugin_dir=" + PLUGIN_DIR, "--engine=cuda", "--precision=bf16")
    out = p.stdout + p.stderr
    if p.returncode == 0 or "engine offered engine=cuda" in out:
        pytest.skip("NOT RUN: a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert p.returncode == 2, out
    assert "engine 'cuda'" in out and "is not offered" in out, out
    assert NO_DEVICE in out or "compute capability" in out, out
