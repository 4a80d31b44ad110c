"""Prometheus names by the conventions
(https://prometheus.io/docs/practices/naming/), beyond `promtool check
metrics` (run too when Debian's `prometheus` package is installed): base
units in the name's suffix, counters ending in `_total`, `_ratio` only for
values in 0..1, `attnserve_build_info` with labels that never change while
the process runs, no bare `status="0"`, every 413 counted, including the
ones http.c and libmicrohttpd write themselves, and vLLM's two load gauges
under vLLM's names mirroring ours."""
import json
import re
import socket
import threading

import requests

from conftest import VLLM_GAUGES, post_attention, promtool_check, slow_body, wait_for


def scrape(server):
    r = requests.get(server.url("/metrics"), timeout=5)
    assert r.status_code == 200
    return r.text


def families(text):
    """{name: type} from the # TYPE lines."""
    return dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))


def samples(text):
    out = []
    for line in text.splitlines():
        if line and not line.startswith("#"):
            m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$', line)
            assert m, line
            out.append((m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")),
                        float(m.group(3))))
    return out


def test_names_follow_the_conventions(server):
    requests.post(server.url("/v1/embeddings"), json={"input": "names"}, timeout=30)
    text = scrape(server)
    types = families(text)
    # The only names with a colon are vLLM's (conftest.VLLM_GAUGES).
    promtool_check(text)
    for name, typ in types.items():
        if ":" in name:
            assert name in VLLM_GAUGES and typ == "gauge", name
            continue
        if typ == "counter":
            assert name.endswith("_total"), name
        else:
            assert not name.endswith("_total"), name
        # Base units only: seconds and bytes, never their multiples.
        for bad in ("_ms", "_milliseconds", "_us", "_kib", "_mib", "_kb", "_mb", "gflops",
                    "_minutes", "_hours"):
            assert bad not in name, name
    for name, labels, value in samples(text):
        if "_ratio" in name and not name.endswith(("_bucket", "_sum", "_count")):
            assert 0 <= value <= 1, (name, value)
        if name == "attnserve_http_requests_total":
            assert labels["status"] != "0", labels
            assert labels["status"].isdigit() or labels["status"] in ("undelivered", "other")
    build = [labels for name, labels, _ in samples(text) if name == "attnserve_build_info"]
    assert len(build) == 1 and sorted(build[0]) == ["simd", "version"], build
    active = {labels["backend"]: v for name, labels, v in samples(text)
              if name == "attnserve_backend_active"}
    assert sorted(active.values())[-1] == 1 and sum(active.values()) == 1, active


def count_413(server):
    return sum(v for name, labels, v in samples(scrape(server))
               if name == "attnserve_http_requests_total" and labels["status"] == "413")


def test_every_413_is_counted(start_server):
    s = start_server(max_body_bytes=1024)
    before = count_413(s)
    # 1. announced by Content-Length: answered from the headers (queued to MHD).
    r = requests.post(s.url("/v1/embeddings"), data=b"x" * 2048,
                      headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 413
    # 2. chunked, found while reading: written by http.c itself.
    c = socket.create_connection(("127.0.0.1", s.settings["port"]), timeout=10)
    c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n" + b"800\r\n" + b"x" * 2048 + b"\r\n0\r\n\r\n")
    assert c.recv(100).startswith(b"HTTP/1.1 413 ")
    c.close()
    # 3. a Content-Length that overflows: written by libmicrohttpd itself.
    c = socket.create_connection(("127.0.0.1", s.settings["port"]), timeout=10)
    c.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 99999999999999999999999\r\n\r\n")
    assert c.recv(100).startswith(b"HTTP/1.1 413 ")
    c.close()
    wait_for(lambda: count_413(s) == before + 3, what="three 413s counted")
    print("413s counted:", json.dumps({k: v for k, v in
                                       ((lab["route"], val) for n, lab, val in samples(scrape(s))
                                        if n == "attnserve_http_requests_total"
                                        and lab["status"] == "413")}))


def vllm_and_ours(server):
    """{name: value} of vLLM's two gauges and ours, from one scrape, with the
    labels of vLLM's checked."""
    model = requests.get(server.url("/v1/models"), timeout=5).json()["data"][0]["id"]
    got = {}
    for name, labels, value in samples(scrape(server)):
        if name in VLLM_GAUGES:
            assert name not in got, "more than one series of %s" % name
            assert labels == {"model_name": model}, labels
            got[name] = value
        elif name in VLLM_GAUGES.values():
            got[name] = value
    assert len(got) == 4, got
    return got


def test_vllm_load_gauges_mirror_ours(start_server):
    """The production stack's router scrapes vllm:num_requests_running and
    vllm:num_requests_waiting (the last sample of each: vLLM serves one
    model). One series each, labelled model_name with the model /v1/models
    lists, equal in every scrape to the gauge it mirrors (one scheduler
    snapshot): idle, and with one slow batch running and one waiting."""
    s = start_server(max_batch_requests=1, max_wait_us=0)
    idle = vllm_and_ours(s)
    assert idle["vllm:num_requests_running"] == idle["vllm:num_requests_waiting"] == 0, idle
    body = slow_body()
    results = []
    slow = [threading.Thread(target=lambda: results.append(post_attention(s, body).status_code))
            for _ in range(2)]
    for t in slow:
        t.start()
    seen = []

    def busy():
        got = vllm_and_ours(s)
        for vllm_name, ours in VLLM_GAUGES.items():
            assert got[vllm_name] == got[ours], (vllm_name, got)
        seen.append(got)
        return got["vllm:num_requests_running"] == 1 and got["vllm:num_requests_waiting"] == 1
    wait_for(busy, timeout=60, what="one slow batch running and one waiting")
    for t in slow:
        t.join(timeout=120)
    assert results == [200, 200], results


def test_vllm_load_gauges_as_the_production_stack_reads_them(server):
    """The production stack's router parses the whole /metrics text with
    prometheus_client's parser and keeps the last sample named
    vllm:num_requests_running (and _waiting): every line must parse, and
    those samples must be the values of the gauges they mirror."""
    from prometheus_client.parser import text_string_to_metric_families
    text = scrape(server)
    last = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            last[sample.name] = sample.value
    for vllm_name, ours in VLLM_GAUGES.items():
        assert vllm_name in last, sorted(last)[:20]
        mirrored = [v for n, _, v in samples(text) if n == ours]
        assert [last[vllm_name]] == mirrored, (vllm_name, last[vllm_name], mirrored)
