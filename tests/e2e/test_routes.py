"""Every route, the headers every response carries, 404/405, request ids,
and the metrics that requests leave behind."""
import requests

from conftest import JSON, assert_error, parse_metrics, wait_for

COMMON = ("x-request-id", "x-queue-time-ms", "x-inference-time-ms", "x-attention-backend")


def test_health_and_ready(server):
    for path, body in (("/health", {"status": "ok"}), ("/ready", {"status": "ready"})):
        r = requests.get(server.url(path), timeout=5)
        assert r.status_code == 200 and r.json() == body
        for h in COMMON:
            assert r.headers[h]
        assert r.headers["x-attention-backend"] == "naive"


def test_head_is_answered_like_get(server):
    r = requests.head(server.url("/health"), timeout=5)
    assert r.status_code == 200 and r.text == ""


def test_info_lists_limits_memory_and_backend(server):
    info = requests.get(server.url("/info"), timeout=5).json()
    assert info["backend"] == "naive" and "naive" in info["backends"]
    assert info["simd"] in ("portable", "avx2", "avx512")
    assert info["threads"] == 2
    limits = info["limits"]
    for key in ("max_batch_tokens", "max_batch_requests", "max_wait_us", "max_queue",
                "request_timeout_ms", "max_body_bytes", "max_connections",
                "connection_timeout_s", "drain_timeout_s"):
        assert limits[key] == server.settings[key], key
    mem = info["memory"]
    assert mem["workspace_bytes"] > 0
    # Requests hold what the budget allows, whatever the queue and connections.
    assert mem["request_memory_bytes"] == server.settings.get("max_request_memory_bytes", 256 << 20)
    # One connection more than the limit (an evicted one may still be closing
    # as its replacement opens) and three /metrics answers not charged to the
    # request-memory budget (two sent, one being freed).
    assert mem["connections_bytes"] == ((server.settings["max_connections"] + 1)
                                        * mem["connection_bytes"] + 3 * (64 << 10))
    assert mem["connection_bytes"] >= 16 << 10  # at least libmicrohttpd's pool
    assert mem["threads_bytes"] > 0 and mem["runtime_bytes"] > 0
    # verification_bytes: the shadow verification slot and trace buffer (issue 7).
    assert mem["verification_bytes"] > 0
    assert mem["worst_case_bytes"] == (mem["weights_bytes"] + mem["workspace_bytes"] +
                                       mem["connections_bytes"] + mem["request_memory_bytes"] +
                                       mem["threads_bytes"] + mem["runtime_bytes"] +
                                       mem["verification_bytes"])
    assert "path" in info["model"]


def test_metrics_format_and_names(server):
    requests.get(server.url("/health"), timeout=5)
    r = requests.get(server.url("/metrics"), timeout=5)
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
    m = parse_metrics(r.text)
    names = {name for name, _ in m}
    for name in ("attnserve_http_requests_total", "attnserve_http_request_duration_seconds_bucket",
                 "attnserve_request_queue_seconds_count", "attnserve_request_inference_seconds_sum",
                 "attnserve_batch_size_bucket", "attnserve_batch_tokens_bucket",
                 "attnserve_queue_depth", "attnserve_http_requests_in_flight",
                 "attnserve_attention_kernel_seconds_total", "attnserve_attention_kernel_calls_total",
                 "attnserve_requests_rejected_total", "attnserve_requests_timed_out_total",
                 "attnserve_requests_dropped_total", "process_resident_memory_bytes",
                 "attnserve_workspace_bytes", "attnserve_build_info", "attnserve_codec_workers",
                 "attnserve_codec_tasks_waiting", "attnserve_codec_busy_seconds_total"):
        assert name in names, name
    assert m[("attnserve_http_requests_total", (("route", "/health"), ("status", "200")))] >= 1
    build = [labels for name, labels in m if name == "attnserve_build_info"]
    # Only labels that never change while the process runs.
    assert sorted(dict(build[0])) == ["simd", "version"]
    assert m[("attnserve_backend_active", (("backend", "naive"),))] == 1
    assert sum(v for (name, _), v in m.items() if name == "attnserve_backend_active") == 1
    assert m[("process_resident_memory_bytes", ())] > 1 << 20


def test_codec_workers_are_counted(start_server):
    """codec_workers threads decode and answer; /metrics shows how many, what
    waits for them and how long they worked, and TEI's /info says how many
    tokenize."""
    s = start_server(codec_workers=3)
    assert s.metric("attnserve_codec_workers") == 3
    busy = s.metric("attnserve_codec_busy_seconds_total")
    r = requests.post(s.url("/v1/embeddings"), json={"input": ["one", "two"] * 64}, timeout=60)
    assert r.status_code == 200, r.text[:200]
    assert s.metric("attnserve_codec_busy_seconds_total") > busy
    assert s.metric("attnserve_codec_tasks_waiting") == 0
    assert requests.get(s.url("/info"), timeout=5).json()["tokenization_workers"] == 3


def test_unknown_path_is_404(server):
    err = assert_error(requests.get(server.url("/nope"), timeout=5), 404, "not_found_error")
    assert "/nope" in err["message"]


def test_wrong_method_is_405_with_allow(server):
    r = requests.post(server.url("/health"), timeout=5)
    assert_error(r, 405, "method_not_allowed_error")
    assert r.headers["Allow"] == "GET, HEAD"
    r = requests.get(server.url("/v1/attention"), timeout=5)
    assert_error(r, 405)
    assert r.headers["Allow"] == "POST"
    r = requests.delete(server.url("/metrics"), timeout=5)
    assert_error(r, 405)


def test_request_id_is_echoed_or_generated(server):
    r = requests.get(server.url("/health"), headers={"x-request-id": "abc-123"}, timeout=5)
    assert r.headers["x-request-id"] == "abc-123"
    a = requests.get(server.url("/health"), timeout=5).headers["x-request-id"]
    b = requests.get(server.url("/health"), timeout=5).headers["x-request-id"]
    assert a and b and a != b
    # An id that could forge headers or log lines is replaced.
    r = requests.get(server.url("/health"), headers={"x-request-id": "a b\"c"}, timeout=5)
    assert r.headers["x-request-id"] != "a b\"c"


def test_every_error_carries_common_headers(server):
    r = requests.post(server.url("/v1/attention"), data="{", headers=JSON, timeout=5)
    assert_error(r, 400)
    for h in COMMON:
        assert r.headers[h]


def test_one_log_line_per_request(server):
    requests.get(server.url("/health"), headers={"x-request-id": "log-line-probe"}, timeout=5)
    # The line is written when MHD reports the request complete, just after
    # the answer went out.
    wait_for(lambda: "request_id=log-line-probe" in server.log_text(), what="the log line")
    lines = [l for l in server.log_text().splitlines() if "request_id=log-line-probe" in l]
    assert len(lines) == 1
    for field in ("route=/health", "status=200", "queue_ms=", "inference_ms=", "total_ms="):
        assert field in lines[0]
