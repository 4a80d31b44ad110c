"""The cuda engine plugin (build/gpu-engines/cuda.so, `make cuda`; e2e builds
it wherever nvcc is) end to end on a machine without a GPU: asked for by
name the service stops with status 2 and the reason; with the plugin present
(from plugin_dir, or found beside the binary with plugin_dir unset) `auto`
keeps a CPU engine, and /info lists the plugin as refused with its reason. On a GPU machine, asked for by name with a model its kernels cannot
compute (MPNet's position bias; the committed tiny task models' heads of 8,
which the attention kernels do not take), the start stops with status 2
naming why.

What cannot run here is skipped as NOT RUN, with the reason written to the
run's output whatever pytest's -r flags (never counted as passed): every
test where nvcc is absent (the plugin cannot be built), the refusal tests
where a GPU offers the engine (tests/gpu/run.sh is the check there), and the
model refusals where no device is (the start stops at the device check
before init; the unit test cuda_plugin/init_refuses_models_it_cannot_compute
checks the plugin's init itself). nvcc present and the plugin missing is a
failure: `make cuda` (or `make e2e`) builds it."""
import json
import os
import subprocess

import pytest
import requests

import conftest
from conftest import MODEL_DIR, ROOT, free_port

PLUGIN_DIR = os.path.join(os.path.dirname(conftest.BIN), "gpu-engines")
PLUGIN = os.path.join(PLUGIN_DIR, "cuda.so")
NVCC = os.environ.get("NVCC") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                               "bin", "nvcc")
NO_DEVICE = "no CUDA device"
GOLDEN = os.path.join(ROOT, "tests", "golden")


def not_run(request, reason):
    """Skips the test, first writing the reason where the run's output shows it."""
    capman = request.config.pluginmanager.getplugin("capturemanager")
    tr = request.config.pluginmanager.getplugin("terminalreporter")
    line = "\n%s: NOT RUN: %s" % (request.node.nodeid, reason)
    if tr is not None and capman is not None:
        with capman.global_and_fixture_disabled():
            tr.write_line(line)
    pytest.skip("NOT RUN: " + reason)


@pytest.fixture(autouse=True)
def plugin_built(request):
    if os.path.exists(PLUGIN):
        return
    if not os.path.exists(NVCC):
        not_run(request, "%s was not built: no nvcc at %s (CUDA_HOME/NVCC), so the cuda "
                "engine's end-to-end checks did not run" % (PLUGIN, NVCC))
    pytest.fail("nvcc is at %s but %s was not built: run `make cuda`" % (NVCC, PLUGIN))


def run_bin(tmp_path, *flags, model=MODEL_DIR):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1,
                               "model": model, "max_batch_tokens": 1024}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([conftest.BIN, "--config", str(cfg)] + list(flags),
                          capture_output=True, text=True, timeout=120, env=env)


def listed(s):
    r = requests.get(s.url("/info"), timeout=5)
    assert r.status_code == 200, r.text
    i = r.json()["engine"]
    return i, {e["name"]: e for e in i["engines"]}


def test_auto_keeps_a_cpu_engine_and_lists_cuda_refused(start_server, request):
    s = start_server(plugin_dir=PLUGIN_DIR)
    i, by_name = listed(s)
    cuda = by_name["cuda"]
    assert cuda["origin"].endswith("gpu-engines/cuda.so")
    if cuda["offered"]:
        not_run(request, "a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert i["name"] == "cpu"
    assert NO_DEVICE in cuda["reason"] or "compute capability" in cuda["reason"], cuda
    assert "engine refused engine=cuda" in s.log_text()


def test_engine_cuda_stops_the_start_with_the_reason(tmp_path, request):
    p = run_bin(tmp_path, "--plugin_dir=" + PLUGIN_DIR, "--engine=cuda", "--precision=bf16")
    out = p.stdout + p.stderr
    if p.returncode == 0 or "engine offered engine=cuda" in out:
        not_run(request, "a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert p.returncode == 2, out
    assert "engine 'cuda'" in out and "is not offered" in out, out
    assert NO_DEVICE in out or "compute capability" in out, out


def test_found_beside_the_binary_without_plugin_dir(start_server, tmp_path, request):
    """`make cuda` puts the plugin beside build/attnserve: with plugin_dir
    unset, auto logs why cuda is refused, and engine: cuda stops the start
    naming the plugin's path and the reason."""
    s = start_server()
    i, by_name = listed(s)
    cuda = by_name["cuda"]
    assert cuda["origin"] == PLUGIN, cuda
    if cuda["offered"]:
        not_run(request, "a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert i["name"] == "cpu" and i["plugin_dir"] == ""
    log = s.log_text()
    assert "engine refused engine=cuda origin=%s reason=" % PLUGIN in log, log
    p = run_bin(tmp_path, "--engine=cuda", "--precision=bf16")
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "engine 'cuda' (%s) is not offered" % PLUGIN in out, out
    assert NO_DEVICE in out or "compute capability" in out, out


# The committed task models (tests/golden/make_task_models.py) and MPNet's,
# each with what the refusal names: the engine computes their heads, Dense
# modules and pooling (tests/gpu/gpu_engine.c checks them with heads of 32),
# not attention over heads of 8, nor a position bias.
REFUSED = [
    ("bert-cls-tiny", "head size 8"),
    ("xlmr-cls-tiny", "head size 8"),
    ("st-dense-max-tiny", "head size 8"),
    ("st-meansqrt-tiny", "head size 8"),
    ("st-lasttoken-tiny", "head size 8"),
    ("mpnet-tiny-model", "relative buckets"),
]


@pytest.mark.parametrize("name,reason", REFUSED, ids=[n for n, _ in REFUSED])
def test_engine_cuda_refuses_a_model_its_kernels_cannot_compute(tmp_path, request, name, reason):
    p = run_bin(tmp_path, "--plugin_dir=" + PLUGIN_DIR, "--engine=cuda", "--precision=bf16",
                model=os.path.join(GOLDEN, name))
    out = p.stdout + p.stderr
    if NO_DEVICE in out or "compute capability" in out:
        not_run(request, "no usable CUDA device here, so the start stops at the device check "
                "before init; build/unit-tests --filter 'cuda_plugin/*' checks the plugin's "
                "init refusing %s" % name)
    assert p.returncode == 2, out
    assert "cannot start the engine" in out and reason in out, out


def test_gpu_attention_cudnn_stops_cleanly_without_a_device(tmp_path, request):
    """gpu_attention=cudnn reaches the engine only once a device is there:
    here the start stops at the device check with status 2 and the reason,
    never a crash (cuDNN is not even loaded)."""
    p = run_bin(tmp_path, "--plugin_dir=" + PLUGIN_DIR, "--engine=cuda", "--precision=bf16",
                "--gpu_attention=cudnn")
    out = p.stdout + p.stderr
    if p.returncode == 0 or "engine offered engine=cuda" in out:
        not_run(request, "a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert p.returncode == 2, out
    assert NO_DEVICE in out or "compute capability" in out, out


def test_gpu_attention_names_are_checked(tmp_path):
    p = run_bin(tmp_path, "--gpu_attention=cudnn9")
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "gpu_attention" in out and "flash" in out and "cudnn" in out, out


def test_a_cpu_engine_reports_no_gpu_attention_kernel(start_server, request):
    s = start_server(plugin_dir=PLUGIN_DIR, gpu_attention="cudnn")
    i, by_name = listed(s)
    if by_name["cuda"]["offered"]:
        not_run(request, "a GPU is here and the cuda engine is offered (tests/gpu/run.sh)")
    assert i["name"] == "cpu"
    assert i["attention_kernel"] is None and i["attention_kernel_detail"] == "", i
    m = requests.get(s.url("/metrics"), timeout=5).text
    assert "attnserve_engine_attention_info{" not in m
