"""The engine settings (engine, precision, plugin_dir) end to end: which
engine runs is named in /info, /metrics and the x-engine / x-precision
headers; the cpu-avx512 plugin (a real engine, build/engines/) serves the
golden embeddings and is guarded by shadow verification like the built-in
engine; broken plugins (build/test-engines/) are listed with their reasons
and never offered (but `instant`, the front end's test engine, scored below
cpu so that auto never picks it: test_instant.py); with plugin_dir unset the plugins beside the binary (or
under its install prefix) are found, and `none` loads none; an engine or
precision that cannot run stops the start with status 2 and the reason;
engine settings are restart-only."""
import json
import math
import os
import shutil
import subprocess

import pytest
import requests

import conftest
from conftest import JSON, MODEL_DIR, free_port, golden, wait_for

# The engine series carry the model they count (one series per served model).
MODEL = os.path.basename(MODEL_DIR.rstrip("/"))

GOLDEN = golden("embeddings.json.gz")
TEXTS = [c for c in GOLDEN["mean_normalized"] if c["text"] and len(c["ids"]) <= 64][:12]
MIN_COSINE = 0.99999  # test_model.c's floor against PyTorch


def build_dir():
    return os.path.dirname(conftest.BIN)


def plugins():
    d = os.path.join(build_dir(), "engines")
    assert os.path.exists(os.path.join(d, "cpu-avx512.so")), "missing %s (make builds it)" % d
    return d


def broken_plugins():
    d = os.path.join(build_dir(), "test-engines")
    assert os.path.exists(os.path.join(d, "no_cpu.so")), "missing %s (make e2e builds it)" % d
    return d


def has_avx512():
    flags = open("/proc/cpuinfo").read()
    return all(f in flags.split() for f in ("avx512f", "avx512bw", "avx512dq", "avx512vl"))


def info(s):
    r = requests.get(s.url("/info"), timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def assert_golden(s, engine, backend=None):
    r = requests.post(s.url("/v1/embeddings"), headers=JSON, timeout=60,
                      data=json.dumps({"input": [c["text"] for c in TEXTS]}))
    assert r.status_code == 200, r.text
    assert r.headers["x-engine"] == engine
    assert r.headers["x-precision"] == "fp32"
    assert r.headers["x-attention-backend"] == (backend or s.settings["backend"])
    for d, case in zip(r.json()["data"], TEXTS):
        c = cosine(d["embedding"], case["embedding"])
        assert c >= MIN_COSINE, "%r: cosine %.8f" % (case["text"][:40], c)


def run_bin(tmp_path, *flags):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1,
                               "model": MODEL_DIR, "max_batch_tokens": 1024}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([conftest.BIN, "--config", str(cfg)] + list(flags),
                          capture_output=True, text=True, timeout=120, env=env)


def cpu_reduced_precisions():
    """The reduced precisions this CPU's instructions allow (kernels/gemm.c's
    gemm_unsupported): bf16 with AVX512_BF16 (or AMX-BF16), int8 with
    AVX512_VNNI."""
    flags = open("/proc/cpuinfo").read().split()
    out = []
    if "avx512_bf16" in flags or "amx_bf16" in flags:
        out.append("bf16")
    if "avx512_vnni" in flags:
        out.append("int8")
    return out


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_reduced_precision_serves_within_its_floor(start_server, precision):
    if precision not in cpu_reduced_precisions():
        pytest.skip("NOT RUN: this CPU lacks the instructions for %s "
                    "(test_refused_engine_or_precision_stops_the_start covers it)" % precision)
    s = start_server(precision=precision)
    i = info(s)["engine"]
    assert i["name"] == "cpu" and i["precision"] == precision
    assert i["precision_check"].startswith(precision)
    r = requests.post(s.url("/embed"), headers=JSON, data=json.dumps({"inputs": "hi"}),
                      timeout=30)
    assert r.status_code == 200 and r.headers["x-precision"] == precision
    assert s.metric("attnserve_engine_info", model=MODEL, engine="cpu", precision=precision) == 1


def test_without_plugins_the_builtin_cpu_engine_serves_fp32(start_server):
    s = start_server(plugin_dir="none")
    i = info(s)["engine"]
    assert i["name"] == "cpu" and i["precision"] == "fp32"
    assert i["engine_setting"] == "auto" and i["precision_setting"] == "fp32"
    assert i["plugin_dir"] == "none" and i["plugin_dirs_looked_in"] == []
    assert i["api_version"] == 6
    assert i["precision_check"] == "fp32: the reference"
    assert [(e["name"], e["origin"], e["offered"]) for e in i["engines"]] == \
        [("cpu", "built-in", True)]
    assert i["engines"][0]["precisions"] == ["fp32"] + cpu_reduced_precisions()
    assert i["weights_mapped_bytes"] > 0 and i["workspace_bytes"] > 0
    before = s.metric("attnserve_engine_forwards_total", model=MODEL, engine="cpu",
                      precision="fp32")
    assert_golden(s, "cpu")
    r = requests.post(s.url("/embed"), headers=JSON, data=json.dumps({"inputs": "hi"}),
                      timeout=30)
    assert r.status_code == 200 and r.headers["x-engine"] == "cpu"
    assert r.headers["x-precision"] == "fp32"
    # Routes that run no encoder forward name no engine.
    for path in ("/health", "/info"):
        h = requests.get(s.url(path), timeout=5).headers
        assert "x-engine" not in h and "x-precision" not in h
    m = s.metrics()
    key = (("engine", "cpu"), ("model", MODEL), ("precision", "fp32"))
    assert m[("attnserve_engine_info", key)] == 1
    assert m[("attnserve_engine_forwards_total", key)] >= before + 2
    assert m[("attnserve_engine_flops_total", key)] > 0
    assert m[("attnserve_engine_forward_seconds_total", key)] > 0


@pytest.mark.skipif(not has_avx512(), reason="NOT RUN: cpu-avx512 needs AVX-512 "
                    "(test_plugin_refused_without_avx512 covers this CPU)")
def test_plugin_engine_serves(start_server):
    s = start_server(plugin_dir=plugins(), engine="cpu-avx512", backend="fused")
    i = info(s)["engine"]
    assert i["name"] == "cpu-avx512" and i["precision"] == "fp32"
    by_name = {e["name"]: e for e in i["engines"]}
    assert by_name["cpu"]["offered"] and by_name["cpu-avx512"]["offered"]
    assert by_name["cpu-avx512"]["origin"].endswith("engines/cpu-avx512.so")
    assert_golden(s, "cpu-avx512")
    assert s.metric("attnserve_engine_info", model=MODEL, engine="cpu-avx512",
                    precision="fp32") == 1
    assert "engine offered engine=cpu-avx512" in s.log_text()


@pytest.mark.skipif(has_avx512(), reason="NOT RUN: this CPU has AVX-512 "
                    "(test_plugin_engine_serves covers it)")
def test_plugin_refused_without_avx512(tmp_path):
    p = run_bin(tmp_path, "--plugin_dir=" + plugins(), "--engine=cpu-avx512")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "needs AVX-512F" in p.stdout + p.stderr


def test_auto_keeps_builtin_with_plugins_present(start_server):
    s = start_server(plugin_dir=plugins())
    assert info(s)["engine"]["name"] == "cpu"


def test_broken_plugins_listed_with_reasons(start_server):
    s = start_server(plugin_dir=broken_plugins())
    i = info(s)["engine"]
    assert i["name"] == "cpu"
    by_name = {e["name"]: e for e in i["engines"]}
    assert set(by_name) == {"cpu", "instant", "no-cpu", "no_symbol", "old_api", "picky"}
    assert sorted(n for n, e in by_name.items() if e["offered"]) == ["cpu", "instant", "picky"]
    assert "no symbol attnserve_engine_plugin" in by_name["no_symbol"]["reason"]
    assert "engine API version 1, this binary speaks version 6" in by_name["old_api"]["reason"]
    assert "scores 0 on this machine" in by_name["no-cpu"]["reason"]
    assert by_name["no-cpu"]["precisions"] == []
    log = s.log_text()
    for name in ("no-cpu", "no_symbol", "old_api"):
        assert "engine refused engine=%s" % name in log


def test_auto_moves_past_an_engine_that_refuses_the_model(start_server, tmp_path):
    # picky scores above cpu and refuses every model at init, as a GPU
    # engine refuses a classifier it has no kernel for: auto serves on cpu.
    s = start_server(plugin_dir=broken_plugins())
    assert info(s)["engine"]["name"] == "cpu"
    assert_golden(s, "cpu")
    log = s.log_text()
    assert "engine cannot serve this model; auto tries the next engine=picky" in log, log
    assert "picky: serves no model" in log
    # Named, it is the only engine tried, and its reason stops the start.
    p = run_bin(tmp_path, "--plugin_dir=" + broken_plugins(), "--engine=picky")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "picky: serves no model" in p.stdout + p.stderr


def test_refused_engine_or_precision_stops_the_start(tmp_path):
    p = run_bin(tmp_path, "--plugin_dir=" + broken_plugins(), "--engine=no-cpu")
    assert p.returncode == 2, p.stdout + p.stderr
    assert "not offered: scores 0 on this machine" in p.stdout + p.stderr
    p = run_bin(tmp_path, "--engine=tpu")
    assert p.returncode == 2 and "unknown engine 'tpu' (valid: cpu, " in p.stdout + p.stderr
    assert "plugins looked for in: " + os.path.join(build_dir(), "engines") in p.stdout + p.stderr
    for precision in sorted({"bf16", "int8"} - set(cpu_reduced_precisions())):
        p = run_bin(tmp_path, "--precision=" + precision)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "cannot run %s" % precision in p.stdout + p.stderr
    # The GPU's precisions are names the cpu engine refuses as such.
    for precision in ("fp16", "tf32"):
        p = run_bin(tmp_path, "--precision=" + precision)
        assert p.returncode == 2, p.stdout + p.stderr
        assert "cannot run %s: %s is a GPU precision" % (precision, precision) in p.stdout + p.stderr
    p = run_bin(tmp_path, "--precision=fp8")
    assert p.returncode == 2 and "precision" in p.stdout + p.stderr
    p = run_bin(tmp_path, "--help")
    assert p.returncode == 0
    for setting in ("--engine", "--precision", "--plugin_dir"):
        assert setting in p.stdout


def beside(bin_path):
    """The plugin directories a binary at bin_path searches with plugin_dir
    unset: its engines/ and gpu-engines/, and <prefix>/lib/attnserve/engines."""
    d = os.path.dirname(os.path.realpath(bin_path))
    return [os.path.join(d, "engines"), os.path.join(d, "gpu-engines"),
            os.path.join(os.path.dirname(d), "lib", "attnserve", "engines")]


def test_plugins_are_found_beside_the_binary(start_server):
    """plugin_dir unset: the plugins make puts beside the binary are listed,
    each offered or refused with its reason (build/engines' cpu-avx512 and,
    after `make cuda`, build/gpu-engines' cuda); build/test-engines is
    never searched, and auto still keeps the highest score offered."""
    s = start_server()
    i = info(s)["engine"]
    assert i["plugin_dir"] == ""
    assert i["plugin_dirs_looked_in"] == beside(conftest.BIN)
    by_name = {e["name"]: e for e in i["engines"]}
    found = {"cpu", "cpu-avx512"}
    if os.path.exists(os.path.join(build_dir(), "gpu-engines", "cuda.so")):
        found.add("cuda")
    assert set(by_name) == found, by_name
    assert by_name["cpu-avx512"]["origin"] == os.path.join(beside(conftest.BIN)[0],
                                                           "cpu-avx512.so")
    best = max((e for e in i["engines"] if e["offered"]), key=lambda e: e["score"])
    assert i["name"] == best["name"]
    log = s.log_text()
    assert "plugin_dir unset: plugins looked for beside the binary" in log
    for e in i["engines"][1:]:
        assert "engine %s engine=%s origin=%s" % (
            "offered" if e["offered"] else "refused", e["name"], e["origin"]) in log


def test_plugin_dir_none_loads_no_plugin(start_server, tmp_path):
    s = start_server(plugin_dir="none")
    assert [(e["name"], e["origin"]) for e in info(s)["engine"]["engines"]] == \
        [("cpu", "built-in")]
    p = run_bin(tmp_path, "--plugin_dir=none", "--engine=cpu-avx512")
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("unknown engine 'cpu-avx512' (valid: cpu, auto); plugins looked for in: nowhere "
            "(plugin_dir is none)") in p.stdout + p.stderr


def test_an_installed_binary_finds_its_prefix_plugins(start_server, tmp_path, monkeypatch):
    """A binary installed as <prefix>/bin/attnserve: with no plugin near it a
    named engine stops the start saying where it looked; with the plugin in
    <prefix>/lib/attnserve/engines the plugin is listed from there."""
    plugin = os.path.join(plugins(), "cpu-avx512.so")
    prefix = tmp_path / "prefix"
    (prefix / "bin").mkdir(parents=True)
    installed = str(prefix / "bin" / "attnserve")
    shutil.copy2(conftest.BIN, installed)
    monkeypatch.setattr(conftest, "BIN", installed)
    p = run_bin(tmp_path, "--engine=cpu-avx512")
    assert p.returncode == 2, p.stdout + p.stderr
    assert ("unknown engine 'cpu-avx512' (valid: cpu, auto); plugins looked for in: %s"
            % ", ".join(beside(installed))) in p.stdout + p.stderr
    lib = prefix / "lib" / "attnserve" / "engines"
    lib.mkdir(parents=True)
    shutil.copy2(plugin, str(lib))
    s = start_server()
    by_name = {e["name"]: e for e in info(s)["engine"]["engines"]}
    assert set(by_name) == {"cpu", "cpu-avx512"}
    assert by_name["cpu-avx512"]["origin"] == str(lib / "cpu-avx512.so")
    assert by_name["cpu-avx512"]["offered"] == has_avx512()


def test_engine_settings_are_restart_only(start_server):
    s = start_server(plugin_dir=plugins())
    s.reload(engine="cpu-avx512", precision="fp32")
    wait_for(lambda: "configuration reloaded" in s.log_text(), timeout=10,
             what="the reload")
    log = s.log_text()
    assert "setting needs a restart; keeping the running value name=engine" in log
    assert info(s)["engine"]["name"] == "cpu"
    assert_golden(s, "cpu")


@pytest.mark.skipif(not has_avx512(), reason="NOT RUN: cpu-avx512 needs AVX-512")
def test_verification_guards_the_plugin_engine(start_server, monkeypatch):
    """The faulty attention backend inside the plugin engine: shadow
    verification catches it and switches to the fallback, as it does for the
    built-in engine (test_verify.py)."""
    faulty = os.path.join(build_dir(), "attnserve-faulty")
    assert os.access(faulty, os.X_OK), "missing %s (make e2e builds it)" % faulty
    engines = plugins()
    monkeypatch.setattr(conftest, "BIN", faulty)
    s = start_server(env={"ATTNSERVE_FAULTY_AFTER": "300"}, plugin_dir=engines,
                     engine="cpu-avx512", backend="faulty", fallback_backends="fused,naive",
                     verify_sample_rate=1.0, verify_mismatch_threshold=2)
    assert info(s)["backend"] == "faulty"
    with requests.Session() as session:
        def tripped():
            r = session.post(s.url("/v1/embeddings"), headers=JSON, timeout=120,
                             data=json.dumps({"input": TEXTS[0]["text"]}))
            assert r.status_code == 200 and r.headers["x-engine"] == "cpu-avx512"
            return info(s)["verification"]["tripped"]
        wait_for(tripped, timeout=180, what="verification to trip")
    i = info(s)
    assert i["backend"] == "fused" and i["fallback_active"] is True
    assert i["engine"]["name"] == "cpu-avx512"
    assert_golden(s, "cpu-avx512", backend="fused")
