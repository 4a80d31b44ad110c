"""GET /openapi.json against the server's own route table, the /docs page, and
CORS (cors_allow_origins) on preflights and ordinary requests."""
import json
import os
import re
import subprocess
import sys

import pytest
import requests

from conftest import JSON, ROOT, assert_error

# The route table: http.c logs one debug line per route at start.
ROUTE_LINE = re.compile(r"DEBUG route method=(\S+) path=(\S+)")


def route_table(server):
    routes = set(ROUTE_LINE.findall(server.log_text()))
    assert routes, "no route lines in the log (log_level debug):\n" + server.log_text()[-4000:]
    return routes


@pytest.fixture(scope="module")
def debug_server(tmp_path_factory):
    from conftest import Server
    s = Server(str(tmp_path_factory.mktemp("openapi")), log_level="debug")
    yield s
    s.check_clean_exit(s.stop())


def document(server):
    r = requests.get(server.url("/openapi.json"), timeout=5)
    assert r.status_code == 200 and r.headers["Content-Type"] == "application/json"
    return r.json()


def test_document_lists_exactly_the_routes_served(debug_server):
    doc = document(debug_server)
    assert doc["openapi"].startswith("3.1")
    # A templated segment ({id}) is a route's trailing "*".
    documented = {(m.upper(), re.sub(r"\{[^}]+\}$", "*", path))
                  for path, item in doc["paths"].items() for m in item if m != "parameters"}
    served = route_table(debug_server)
    assert served - documented == set(), "routes served but not documented"
    assert documented - served == set(), "routes documented but not served"


def test_document_version_is_the_binary_s(debug_server):
    info = requests.get(debug_server.url("/info"), timeout=5).json()
    assert document(debug_server)["info"]["version"] == info["version"]


def test_every_reference_resolves(debug_server):
    doc = document(debug_server)
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([^"]+)"', json.dumps(doc)))
    assert refs and refs <= set(doc["components"]["schemas"])


def test_every_request_example_is_accepted(debug_server):
    """The bodies /docs offers for "Try it out" are answered as they are: 200,
    or 424 where the route's task is not the served model's (a rerank on this
    embedding model)."""
    doc = document(debug_server)
    sent = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            media = op.get("requestBody", {}).get("content", {}).get("application/json", {})
            if "example" not in media:
                continue
            r = requests.request(method, debug_server.url(path), json=media["example"],
                                 timeout=30)
            sent[path] = r.status_code
            assert r.status_code in (200, 424), (path, r.status_code, r.text[:500])
            assert str(r.status_code) in op["responses"], (path, r.status_code)
    assert sent.get("/v1/embeddings") == 200 and sent.get("/embed") == 200, sent
    assert 424 in sent.values(), sent  # the rerank examples, on an embedder


def test_security_says_which_routes_need_the_key(start_server):
    """With a key configured, exactly the operations the document marks open
    (security: []) answer without it; every other one is 401, so /docs asks
    for the key (Authorize) where the service will. (/metrics needs it only
    with metrics_require_key, set here.)"""
    s = start_server(env={"ATTNSERVE_API_KEY": "docs-key"}, metrics_require_key=True)
    doc = document(s)
    assert doc["security"] == [{"bearer": []}, {}]
    assert doc["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"
    fill = {"{id}": "x", "{file}": "docs.js"}
    opened = set()
    for path, item in doc["paths"].items():
        url = path
        for k, v in fill.items():
            url = url.replace(k, v)
        for method, op in item.items():
            if method == "parameters":
                continue
            r = requests.request(method, s.url(url), json={} if method == "post" else None,
                                 timeout=30)
            if op.get("security") == []:
                opened.add((method, path))
                assert r.status_code != 401, (method, path)
            else:
                assert r.status_code == 401, (method, path, r.status_code, r.text[:300])
    assert ("get", "/docs") in opened and ("get", "/health") in opened


def test_committed_document_is_what_the_generator_writes():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "gen_openapi.py"),
                        "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_docs_page_needs_nothing_from_elsewhere(debug_server):
    r = requests.get(debug_server.url("/docs"), timeout=5)
    assert r.status_code == 200 and r.headers["Content-Type"] == "text/html; charset=utf-8"
    page = r.text
    assert "openapi.json" in page
    # Only this origin, and no inline script or style for the policy to allow.
    csp = dict(d.strip().split(" ", 1) for d in r.headers["Content-Security-Policy"].split(";"))
    assert csp["default-src"] == "'none'" and csp["script-src"] == "'self'"
    assert csp["style-src"] == "'self'" and csp["connect-src"] == "'self'"
    assert csp["img-src"] == "'self' data:" and csp["frame-ancestors"] == "'none'"
    assert r.headers["Cache-Control"] == "no-cache"
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert "<style" not in page and not re.search(r"<script(?![^>]*\bsrc=)", page)
    # No script, style, font or image from another host: every src/href is
    # relative, and nothing is imported by URL.
    links = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', page)
    for url in links:
        assert not re.match(r"^(?:[a-z]+:)?//", url), url
    assert "@import" not in page and "cdn" not in page.lower()
    # Every file the page links is served, typed and cached as it should be:
    # Swagger UI's carry its version and are kept for good, the starter script
    # is asked for again each time.
    want = {"docs/swagger-ui-bundle.js": ("text/javascript; charset=utf-8", True),
            "docs/swagger-ui.css": ("text/css; charset=utf-8", True),
            "docs/favicon-32x32.png": ("image/png", True),
            "docs/docs.js": ("text/javascript; charset=utf-8", False)}
    assert {u.split("?")[0] for u in links} == set(want) | {"openapi.json"}, links
    for url in links:
        if url == "openapi.json":
            continue
        r = requests.get(debug_server.url("/" + url), timeout=5)
        ctype, versioned = want[url.split("?")[0]]
        assert r.status_code == 200 and r.headers["Content-Type"] == ctype, url
        assert r.headers["X-Content-Type-Options"] == "nosniff"
        if versioned:
            assert re.fullmatch(r"v=\d+\.\d+\.\d+", url.split("?")[1]), url
            assert r.headers["Cache-Control"] == "public, max-age=31536000, immutable"
        else:
            assert r.headers["Cache-Control"] == "no-cache"
        assert len(r.content) > 100, url
    starter = requests.get(debug_server.url("/docs/docs.js"), timeout=5).text
    assert 'url: "openapi.json"' in starter and "validatorUrl: null" in starter
    assert not re.search(r"https?://", starter.replace("validator.swagger.io", ""))
    # Swagger UI's licence is served beside it, and it is Apache-2.0.
    r = requests.get(debug_server.url("/docs/LICENSE"), timeout=5)
    assert r.status_code == 200 and "Apache License, Version 2.0" in r.text
    assert_error(requests.get(debug_server.url("/docs/nothing.js"), timeout=5), 404)


def test_docs_files_are_the_fixed_list_only(debug_server):
    """/docs/{file} serves the page's own files by exact name, and nothing
    else: no path out of the list, escaped or not, no file of the working
    directory, no other route's answer. Sent raw (http.client), so that no
    client folds the dots away before the service sees them."""
    import http.client
    port = int(debug_server.base.rsplit(":", 1)[1])

    def get(path):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, body

    # The way of asking reaches the files: the listed name is served.
    status, body = get("/docs/docs.js")
    assert status == 200 and b"openapi.json" in body
    for path in ["/docs/../openapi.json", "/docs/..%2fopenapi.json", "/docs/%2e%2e/openapi.json",
                 "/docs/./docs.js", "/docs/docs.js/", "/docs/docs.js/x", "/docs//docs.js",
                 "/docs/%2fetc%2fpasswd", "/docs/..%2f..%2f..%2fetc%2fpasswd",
                 "/docs/Makefile", "/docs/server%2fhttp%2fdocs.js", "/docs/DOCS.JS",
                 "/docs/docs.js%20"]:
        status, body = get(path)
        assert status == 404, (path, status, body[:200])
        assert b"root:" not in body and b"swagger" not in body.lower(), path


def test_docs_page_shows_the_bundled_swagger_ui_version(debug_server):
    """The version in the page's links is the one the build took in, as
    scripts/get-swagger-ui.sh pins it."""
    pinned = re.search(r"^VERSION=(\S+)$", open(os.path.join(ROOT, "scripts",
                                                             "get-swagger-ui.sh")).read(),
                       re.M).group(1)
    page = requests.get(debug_server.url("/docs"), timeout=5).text
    assert set(re.findall(r"\?v=([^\"]+)", page)) == {pinned}
    bundle = requests.get(debug_server.url("/docs/swagger-ui-bundle.js"), timeout=5).text
    assert 'PACKAGE_VERSION:"%s"' % pinned in bundle


def test_cors_off_by_default(debug_server):
    r = requests.options(debug_server.url("/v1/embeddings"), timeout=5,
                         headers={"Origin": "https://app.example",
                                  "Access-Control-Request-Method": "POST"})
    assert_error(r, 405)
    r = requests.get(debug_server.url("/health"), headers={"Origin": "https://app.example"},
                     timeout=5)
    assert r.status_code == 200
    assert not any(h.lower().startswith("access-control-") for h in r.headers)


def test_cors_preflight_and_simple_requests(start_server):
    s = start_server(cors_allow_origins="https://app.example, http://localhost:3000")
    pre = {"Origin": "https://app.example", "Access-Control-Request-Method": "POST",
           "Access-Control-Request-Headers": "content-type, authorization"}
    r = requests.options(s.url("/v1/embeddings"), headers=pre, timeout=5)
    assert r.status_code == 204, r.text
    assert r.headers["Access-Control-Allow-Origin"] == "https://app.example"
    assert "POST" in r.headers["Access-Control-Allow-Methods"]
    assert r.headers["Access-Control-Allow-Headers"] == "content-type, authorization"
    assert int(r.headers["Access-Control-Max-Age"]) > 0
    assert "Origin" in r.headers["Vary"]
    assert r.text == ""
    # The request itself, and an error, carry the origin too.
    origin = {"Origin": "http://localhost:3000"}
    r = requests.post(s.url("/v1/embeddings"), data=json.dumps({"input": "hi"}),
                      headers=dict(JSON, **origin), timeout=30)
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    assert "x-request-id" in r.headers["Access-Control-Expose-Headers"]
    r = requests.post(s.url("/v1/embeddings"), data="{", headers=dict(JSON, **origin), timeout=5)
    assert r.status_code == 400
    assert r.headers["Access-Control-Allow-Origin"] == "http://localhost:3000"
    # An origin not listed gets no CORS header; a path not served is 404.
    r = requests.options(s.url("/v1/embeddings"), timeout=5,
                         headers=dict(pre, Origin="https://evil.example"))
    assert "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(s.url("/nowhere"), headers=pre, timeout=5)
    assert_error(r, 404)


def test_cors_any_origin(start_server):
    s = start_server(cors_allow_origins="*")
    r = requests.get(s.url("/health"), headers={"Origin": "https://x.example"}, timeout=5)
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    assert "Vary" not in r.headers


def test_cors_setting_is_checked(tmp_path):
    from conftest import BIN
    r = subprocess.run([BIN, "--cors_allow_origins=app.example", "--print-config"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 2 and "cors_allow_origins" in r.stderr
