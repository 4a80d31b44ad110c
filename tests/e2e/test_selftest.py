"""The start-up self-test and the fallback order, with build/attnserve-faulty
(the service plus a test-only backend "faulty": naive that corrupts its output
from its first forward call): the faulty backend is refused at start, named or
picked by auto, and the service serves correctly on the fallback; /info and
/metrics say so; `attnserve selftest` prints its table and exits 1 for the
faulty binary and 0 for the normal one, checks every precision's GEMMs against
their element bound (failing on the faulty binary's wrong GEMM), and with
`models` tests every model,
failing when one fails; a SIGHUP to the faulty backend is
refused and the backend in force kept, while a SIGHUP to naive still works."""
import json
import math
import os
import re
import subprocess

import pytest
import requests

import conftest
from conftest import (BASE_SETTINGS, JSON, ROOT, attention_case, golden, max_abs_diff,
                      post_attention, wait_for)

FAULTY = os.path.join(os.path.dirname(conftest.BIN), "attnserve-faulty")
# The tiny models of tests/golden/make_task_models.py, for `models`.
RERANKER = os.path.join(ROOT, "tests", "golden", "xlmr-cls-tiny")
CLASSIFIER = os.path.join(ROOT, "tests", "golden", "bert-cls-tiny")
GOLDEN = golden("embeddings.json.gz")
TEXTS = [c for c in GOLDEN["mean_normalized"] if c["text"]][:12]
MIN_COSINE = 0.99999
# `attnserve selftest` runs every backend on every SIMD path: seconds under
# the sanitizers on a busy machine.
COMMAND_TIMEOUT_S = 300
# The bf16 backend is self-tested too where the CPU offers it (AVX512_BF16).
BF16 = {"bf16"} if "avx512_bf16" in open("/proc/cpuinfo").read().split() else set()


@pytest.fixture
def faulty(monkeypatch):
    """Servers started from now on in the test run build/attnserve-faulty."""
    assert os.access(FAULTY, os.X_OK), "missing %s (make e2e builds it)" % FAULTY
    monkeypatch.setattr(conftest, "BIN", FAULTY)


def info(s):
    r = requests.get(s.url("/info"), timeout=5)
    assert r.status_code == 200, r.text
    return r.json()


def selftest_entry(inf, backend):
    entries = [e for e in inf["selftest"] if e["backend"] == backend]
    assert len(entries) == 1, inf["selftest"]
    return entries[0]


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


def assert_serves_correctly(s, backend):
    """Embeddings match the golden vectors and attention the float64
    reference, computed by backend."""
    r = requests.post(s.url("/v1/embeddings"), headers=JSON, timeout=60,
                      data=json.dumps({"input": [c["text"] for c in TEXTS]}))
    assert r.status_code == 200, r.text
    assert r.headers["x-attention-backend"] == backend
    for d, case in zip(r.json()["data"], TEXTS):
        c = cosine(d["embedding"], case["embedding"])
        assert c >= MIN_COSINE, "%r: cosine %.8f" % (case["text"][:40], c)
    body, want = attention_case(11, 37, 3, 16, causal=True)
    r = post_attention(s, body)
    assert r.status_code == 200, r.text
    assert r.json()["backend"] == backend
    assert max_abs_diff(r.json()["output"], want) < 1e-5


def metrics_selftest(s):
    m = s.metrics()
    passed = {dict(k[1])["backend"]: v for k, v in m.items()
              if k[0] == "attnserve_selftest_passed"}
    ratio = {dict(k[1])["backend"]: v for k, v in m.items()
             if k[0] == "attnserve_selftest_max_error_over_bound"}
    return passed, ratio, m[("attnserve_backend_fallback_active", ())]


# ---- start-up -----------------------------------------------------------------------

@pytest.mark.parametrize("backend,mode", [("faulty", "all"), ("auto", "all"), ("faulty", "tail")])
def test_faulty_backend_is_refused_at_start_and_fused_serves(faulty, start_server, backend, mode):
    s = start_server(backend=backend, fallback_backends="fused,naive",
                     env={"ATTNSERVE_FAULTY_MODE": mode})
    inf = info(s)
    assert inf["backend"] == "fused"
    assert inf["backend_setting"] == backend
    assert inf["backend_configured"] == "faulty"  # auto picks faulty: the highest speed_rank
    assert inf["fallback_active"] is True
    bad = selftest_entry(inf, "faulty")
    assert bad["passed"] is False and bad["simd"] == "portable"
    assert bad["shapes_passed"] < bad["shapes"]
    assert bad["max_error_ratio"] is None or bad["max_error_ratio"] > 1
    assert re.search(r"seq \d+ token \d+ \(row \d+ of the sequence\) head \d+ dim \d+: got ",
                     bad["reason"]), bad["reason"]
    for name in ("naive", "fused"):
        good = selftest_entry(inf, name)
        assert good["passed"] is True and good["reason"] is None
        assert good["shapes_passed"] == good["shapes"] >= 6
        assert 0 < good["max_error_ratio"] <= 1
        assert 0 < good["max_abs_error"] < 1e-3 and good["ms"] > 0

    passed, ratio, fallback = metrics_selftest(s)
    assert passed == {"naive": 1, "fused": 1, "faulty": 0, **{b: 1 for b in BF16}}
    assert ratio["faulty"] > 1 and 0 < ratio["fused"] <= 1 and 0 < ratio["naive"] <= 1
    assert fallback == 1

    log = s.log_text()
    assert re.search(r"WARN +backend failed its self-test and will not be used backend=faulty "
                     r"simd=portable .*reason=\"case '[^']+' \(B=\d+ T=\d+ H=\d+ D=\d+ "
                     r"causal=[01]\): seq \d+ token \d+", log), log[-4000:]
    assert re.search(r"WARN +configured backend refused backend=%s reason=\"backend 'faulty' "
                     r"failed its start-up self-test: case" % backend, log), log[-4000:]
    assert re.search(r"WARN +using fallback backend backend=fused", log), log[-4000:]
    assert_serves_correctly(s, "fused")


def test_fallback_order_is_followed(faulty, start_server):
    """The first of fallback_backends that passed: naive when it comes first."""
    s = start_server(backend="faulty", fallback_backends="faulty,naive,fused")
    inf = info(s)
    assert inf["backend"] == "naive" and inf["fallback_active"] is True
    assert re.search(r"fallback backend refused backend=faulty reason=\"backend 'faulty' failed",
                     s.log_text())
    assert_serves_correctly(s, "naive")


def test_no_backend_passing_is_a_start_up_error(faulty, tmp_path):
    cfg = dict(BASE_SETTINGS, backend="faulty", fallback_backends="faulty",
               port=conftest.free_port())
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    # Start-up ends in seconds; a service that wrongly starts serving would
    # run until the timeout.
    p = subprocess.run([FAULTY, "--config", str(path)], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "no attention backend can run the configured shapes and passed its self-test" in p.stderr
    assert "backend failed its self-test and will not be used backend=faulty" in p.stderr


def test_normal_binary_uses_the_configured_backend(start_server):
    s = start_server(backend="fused", fallback_backends="naive")
    inf = info(s)
    assert inf["backend"] == inf["backend_configured"] == "fused"
    assert inf["fallback_active"] is False
    assert {e["backend"] for e in inf["selftest"]} == {"naive", "fused"} | BF16
    assert all(e["passed"] for e in inf["selftest"])
    assert selftest_entry(inf, "fused")["simd"] == inf["simd"]
    passed, _, fallback = metrics_selftest(s)
    assert passed == {"naive": 1, "fused": 1, **{b: 1 for b in BF16}}
    assert fallback == 0
    assert "backend passed its self-test backend=fused" in s.log_text()


# ---- SIGHUP -----------------------------------------------------------------------------

def test_sighup_to_a_backend_that_failed_is_refused(faulty, start_server):
    s = start_server(backend="fused", fallback_backends="naive")
    assert info(s)["fallback_active"] is False
    s.reload(backend="faulty")
    wait_for(lambda: "backend refused on reload" in s.log_text(), what="the refusal")
    assert re.search(r"WARN +backend refused on reload; keeping the one in force requested=faulty "
                     r"kept=fused reason=\"backend 'faulty' failed its start-up self-test: case",
                     s.log_text()), s.log_text()[-4000:]
    wait_for(lambda: "configuration reloaded" in s.log_text(), what="the reload to finish")
    inf = info(s)
    assert inf["backend"] == "fused"
    assert inf["backend_setting"] == "faulty" and inf["backend_configured"] == "faulty"
    assert inf["fallback_active"] is True
    assert metrics_selftest(s)[2] == 1
    assert_serves_correctly(s, "fused")
    m = s.metrics()
    assert m.get(("attnserve_attention_kernel_calls_total", (("backend", "faulty"),)), 0) == 0

    s.reload(backend="naive")
    wait_for(lambda: "backend switched" in s.log_text(), what="the switch to naive")
    assert re.search(r"backend switched from=fused to=naive", s.log_text())
    inf = info(s)
    assert inf["backend"] == inf["backend_configured"] == "naive"
    assert inf["fallback_active"] is False
    assert metrics_selftest(s)[2] == 0
    assert_serves_correctly(s, "naive")


# ---- `attnserve selftest` ----------------------------------------------------------------

def run_selftest(binary, tmp_path, env=None, **settings):
    cfg = dict(BASE_SETTINGS, **settings)
    if "models" in settings:  # the base `model` beside `models` is refused
        cfg.pop("model", None)
    path = tmp_path / "selftest.json"
    path.write_text(json.dumps(cfg))
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")},
               **(env or {}))
    p = subprocess.run([binary, "selftest", "--config", str(path)], capture_output=True,
                       text=True, env=env, timeout=COMMAND_TIMEOUT_S)
    lines = p.stdout.splitlines()
    head = [i for i, line in enumerate(lines) if line.split()[:1] == ["backend"]]
    assert head, p.stdout + p.stderr
    assert lines[head[0]].split() == ["backend", "simd", "shapes", "max_abs_error",
                                      "mean_abs_error", "max_ratio", "result", "ms"]
    rows = []
    for line in lines[head[0] + 1:]:
        if not line.strip():
            break
        f = line.split()
        assert len(f) == 8, line
        rows.append({"backend": f[0], "simd": f[1], "shapes": f[2], "max_abs_error": float(f[3]),
                     "max_ratio": float(f[5]), "result": f[6], "ms": float(f[7])})
    return p, rows


def test_selftest_command_passes_on_the_normal_binary(tmp_path):
    p, rows = run_selftest(conftest.BIN, tmp_path, backend="auto", fallback_backends="fused,naive")
    assert p.returncode == 0, p.stdout + p.stderr
    assert {r["backend"] for r in rows} == {"naive", "fused"} | BF16
    # naive has one path; fused one row per SIMD path the CPU has, portable first.
    assert [r["simd"] for r in rows if r["backend"] == "naive"] == ["portable"]
    fused = [r["simd"] for r in rows if r["backend"] == "fused"]
    assert fused[0] == "portable" and len(fused) == len(set(fused))
    assert set(fused) <= {"portable", "avx2", "avx512"}
    for r in rows:
        assert r["result"] == "pass" and 0 < r["max_ratio"] <= 1 and r["ms"] > 0
        n, total = map(int, r["shapes"].split("/"))
        assert n == total >= 6
    assert "auto (fused): pass" in p.stdout
    assert "failures" not in p.stdout


def gemm_section(stdout):
    """The command's GEMM table: {precision: [(simd, max_ratio, result)]}, and
    {precision: line} for those that did not run."""
    lines = stdout.splitlines()
    head = [i for i, line in enumerate(lines) if line.startswith("GEMM self-test")]
    assert len(head) == 1, stdout
    assert lines[head[0] + 1].split() == ["precision", "simd", "max_ratio", "result", "ms"]
    rows, other = {}, {}
    for line in lines[head[0] + 2:]:
        f = line.split()
        if not f or line.startswith("  "):
            continue
        if f[1] in ("portable", "avx2", "avx512"):
            rows.setdefault(f[0], []).append((f[1], float(f[2]), f[3]))
        else:
            other[f[0]] = line
    return rows, other


def test_selftest_command_checks_every_precisions_gemms(tmp_path):
    p, table = run_selftest(conftest.BIN, tmp_path, backend="fused", fallback_backends="naive")
    assert p.returncode == 0, p.stdout + p.stderr
    rows, other = gemm_section(p.stdout)
    fused = [r["simd"] for r in table if r["backend"] == "fused"]
    # fp32 on every SIMD path the CPU has (OpenBLAS's sgemm below avx512, our
    # packed kernel on it), within its bound.
    assert [r[0] for r in rows["fp32"]] == fused, p.stdout
    assert all(r[2] == "pass" and 0 < r[1] <= 1 for r in rows["fp32"]), p.stdout
    if BF16:
        assert [r[0] for r in rows["bf16"]] == ["avx512"], p.stdout
        assert rows["bf16"][0][2] == "pass" and 0 < rows["bf16"][0][1] <= 1, p.stdout
    else:
        assert "not offered on this CPU: " in other["bf16"], p.stdout
    assert "no element bound" in other["int8"], p.stdout
    for gpu in ("fp16", "tf32"):
        assert "not a CPU precision: %s is a GPU precision" % gpu in other[gpu], p.stdout
    assert "FAIL" not in p.stdout


def test_selftest_command_fails_a_wrong_gemm(tmp_path):
    # The faulty binary's gemm_run is wrong under ATTNSERVE_FAULTY_GEMM
    # (tests/faulty/faulty_gemm.c); the attention backends named pass.
    p, table = run_selftest(FAULTY, tmp_path, env={"ATTNSERVE_FAULTY_GEMM": "1"},
                            backend="fused", fallback_backends="naive")
    assert p.returncode == 1, p.stdout + p.stderr
    assert all(r["result"] == "pass" for r in table if r["backend"] == "fused")
    rows, _ = gemm_section(p.stdout)
    assert rows["fp32"] and all(r[2] == "FAIL" and r[1] > 1 for r in rows["fp32"]), p.stdout
    assert re.search(r"fp32/\w+: fp32 \d+x\d+x\d+: y\[0\]\[0\] = \S+, exact \S+: error \S+ of the "
                     r"bound", p.stdout), p.stdout
    # Without the variable the same binary's GEMMs pass.
    p, _ = run_selftest(FAULTY, tmp_path, backend="fused", fallback_backends="naive")
    assert p.returncode == 0, p.stdout + p.stderr
    assert all(r[2] == "pass" for r in gemm_section(p.stdout)[0]["fp32"])


def test_selftest_command_fails_on_the_faulty_binary(tmp_path):
    assert os.access(FAULTY, os.X_OK)
    p, rows = run_selftest(FAULTY, tmp_path, backend="auto", fallback_backends="fused,naive")
    assert p.returncode == 1, p.stdout + p.stderr
    bad = [r for r in rows if r["backend"] == "faulty"]
    assert len(bad) == 1 and bad[0]["result"] == "FAIL" and bad[0]["max_ratio"] > 1
    assert bad[0]["shapes"].startswith("0/")
    assert all(r["result"] == "pass" for r in rows if r["backend"] != "faulty")
    assert re.search(r"faulty/portable: case '[^']+' \(.*\): seq \d+ token \d+ .* head \d+ dim \d+: "
                     r"got ", p.stdout), p.stdout
    assert "auto (faulty): FAIL" in p.stdout

    # A configuration that never names faulty passes on the same binary.
    p, rows = run_selftest(FAULTY, tmp_path, backend="fused", fallback_backends="naive")
    assert p.returncode == 0, p.stdout + p.stderr
    assert any(r["backend"] == "faulty" and r["result"] == "FAIL" for r in rows)


def test_selftest_command_refuses_bad_settings(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    p = subprocess.run([conftest.BIN, "selftest", "--backend=bogus"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert p.returncode == 2 and "backend" in p.stderr
    p = subprocess.run([conftest.BIN, "selftest", "--model=" + str(tmp_path / "none")],
                       capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "cannot read the model" in p.stderr
    # Every model of `models` is read, not only the first.
    p = subprocess.run([conftest.BIN, "selftest",
                        "--models=a=%s,b=%s" % (RERANKER, tmp_path / "none")],
                       capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "cannot read the model in %s" % (tmp_path / "none") in p.stderr, p.stderr
    p = subprocess.run([conftest.BIN, "--help"], capture_output=True, text=True, env=env,
                       timeout=60)
    assert p.returncode == 0 and " selftest [--config PATH]" in p.stdout


# ---- `attnserve selftest` with several models ---------------------------------------------

MODEL_SECTION = re.compile(r"^self-test of model (\S+) \((\S+); engine (\S+), "
                           r"precision (\S+); (\d+) heads of (\d+), inputs up to (\d+) "
                           r"tokens\)", re.M)


def sections(stdout):
    """Each model's section: its header's fields, its table's rows and the
    verdicts on the backends the configuration names."""
    heads = list(MODEL_SECTION.finditer(stdout))
    out = []
    for i, h in enumerate(heads):
        text = stdout[h.start():heads[i + 1].start() if i + 1 < len(heads) else len(stdout)]
        lines = text.splitlines()
        rows = {}
        for line in lines[3:]:
            if not line.strip():
                break
            f = line.split()
            rows[(f[0], f[1])] = {"shapes": f[2], "result": f[6]}
        verdicts = dict(re.findall(r"^  (\S+(?: \(\S+\))?): (pass|FAIL)", text, re.M))
        out.append({"name": h.group(1), "path": h.group(2), "engine": h.group(3),
                    "precision": h.group(4), "heads": int(h.group(5)),
                    "head_dim": int(h.group(6)), "rows": rows, "verdicts": verdicts})
    return out


def test_selftest_command_tests_every_model(tmp_path):
    models = [{"name": "rerank", "path": RERANKER, "engine": "cpu"},
              {"name": "classify", "path": CLASSIFIER, "precision": "fp32"}]
    p, _ = run_selftest(conftest.BIN, tmp_path, models=models, backend="fused",
                        fallback_backends="naive")
    assert p.returncode == 0, p.stdout + p.stderr
    got = sections(p.stdout)
    assert [(s["name"], s["path"]) for s in got] == [("rerank", RERANKER),
                                                     ("classify", CLASSIFIER)], p.stdout
    # Each with its own engine and precision, the process-wide ones where
    # its entry leaves them.
    assert (got[0]["engine"], got[1]["engine"]) == ("cpu", BASE_SETTINGS.get("engine", "auto"))
    assert got[1]["precision"] == "fp32"
    for s in got:
        assert (s["heads"], s["head_dim"]) == (4, 8)
        assert {b for b, _ in s["rows"]} == {"naive", "fused"} | BF16
        assert all(r["result"] == "pass" for r in s["rows"].values())
        assert s["verdicts"] == {"fused": "pass", "naive": "pass"}
    assert "models: 2 of 2 passed" in p.stdout


def test_selftest_command_fails_when_one_model_fails(tmp_path):
    """faulty stays correct for its first ATTNSERVE_FAULTY_AFTER forward
    calls: one model's run of them, so the first model passes and the second
    fails; the command must test both and exit 1, as start-up refuses it."""
    one = [{"name": "rerank", "path": RERANKER}]
    p, _ = run_selftest(FAULTY, tmp_path, env={"ATTNSERVE_FAULTY_AFTER": "1000000"}, models=one,
                        backend="faulty", fallback_backends="naive")
    assert p.returncode == 0, p.stdout + p.stderr
    calls = int(sections(p.stdout)[0]["rows"][("faulty", "portable")]["shapes"].split("/")[1])

    both = one + [{"name": "classify", "path": CLASSIFIER}]
    p, _ = run_selftest(FAULTY, tmp_path, env={"ATTNSERVE_FAULTY_AFTER": str(calls)},
                        models=both, backend="faulty", fallback_backends="naive")
    assert p.returncode == 1, p.stdout + p.stderr
    first, second = sections(p.stdout)
    assert first["rows"][("faulty", "portable")]["result"] == "pass"
    assert first["verdicts"]["faulty"] == "pass"
    assert second["rows"][("faulty", "portable")]["result"] == "FAIL"
    assert second["verdicts"] == {"faulty": "FAIL", "naive": "pass"}
    assert "models: 1 of 2 passed; failed: classify" in p.stdout
