"""GET /docs in a real browser: Debian's chromium, headless, driven through
the Chrome DevTools protocol (websockets, from requirements.txt). The page
loads Swagger UI from the service alone, a route opens with its fields, and a
request typed into the page is sent by it and its answer shown.

The browser is part of the test's packages (scripts/install-deps.sh): where
it is missing this test fails, it is never skipped. Every name it resolves,
other than 127.0.0.1, fails, and every request the page makes is recorded, so
a file fetched from anywhere else is caught both ways."""
import contextlib
import json
import os
import subprocess
import time
import urllib.parse

import pytest
import requests
from websockets.sync.client import connect

from conftest import JSON

CHROMIUM = "/usr/bin/chromium"
# Swagger UI names an operation's block operations-<tag>-<operationId>.
EMBEDDINGS_OP = "#operations-OpenAI-openai_embeddings"
BODY = {"input": "typed into the docs page"}


class Browser:
    """One headless Chromium with one page, and the page's DevTools session:
    call() sends a command and waits for its answer, keeping the events that
    arrive meanwhile in self.events."""

    def __init__(self, workdir):
        self.profile = os.path.join(workdir, "chromium-profile")
        os.makedirs(self.profile)
        self.log = open(os.path.join(workdir, "chromium.log"), "w+")
        # --no-sandbox: the tests run as root, where Chromium's sandbox
        # refuses to start. The resolver rule makes every other host fail.
        self.proc = subprocess.Popen(
            [CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
             "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
             "--disable-extensions", "--disable-background-networking",
             "--disable-component-update", "--disable-sync",
             "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
             "--user-data-dir=" + self.profile, "--remote-debugging-port=0",
             "--window-size=1280,2000", "about:blank"],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.sockets = contextlib.ExitStack()
        try:
            self.ws = self.sockets.enter_context(
                connect(self._page_socket(), max_size=None, open_timeout=30))
        except BaseException:
            self.close()
            raise
        self.next_id = 0
        self.events = []

    def _page_socket(self):
        """The page's DevTools address, once Chromium has written its port."""
        active = os.path.join(self.profile, "DevToolsActivePort")
        end = time.time() + 60
        while time.time() < end:
            assert self.proc.poll() is None, "chromium exited:\n" + self.log_text()
            if os.path.exists(active):
                with open(active) as f:
                    port = f.readline().strip()
                if port:
                    pages = [t for t in requests.get("http://127.0.0.1:%s/json/list" % port,
                                                     timeout=5).json()
                             if t["type"] == "page"]
                    if pages:
                        return pages[0]["webSocketDebuggerUrl"]
            time.sleep(0.1)
        raise AssertionError("chromium wrote no DevTools port in 60 s:\n" + self.log_text())

    def log_text(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-4000:]

    def call(self, method, timeout=120, **params):
        self.next_id += 1
        mine = self.next_id
        self.ws.send(json.dumps({"id": mine, "method": method, "params": params}))
        end = time.time() + timeout
        while True:
            msg = json.loads(self.ws.recv(timeout=max(end - time.time(), 0.001)))
            if msg.get("id") == mine:
                assert "error" not in msg, (method, msg["error"])
                return msg["result"]
            self.events.append(msg)

    def js(self, expression):
        """The value of a JavaScript expression in the page."""
        r = self.call("Runtime.evaluate", expression=expression, returnByValue=True,
                      awaitPromise=True)
        assert "exceptionDetails" not in r, (expression, r["exceptionDetails"])
        return r["result"].get("value")

    def wait(self, expression, what, timeout=60):
        """Polls until the expression is truthy in the page; returns its value
        (true for an element)."""
        end = time.time() + timeout
        while time.time() < end:
            value = self.js("(v => v instanceof Node || v)(%s)" % expression)
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError("%s: not within %d s; the page shows:\n%s" % (
            what, timeout, (self.js("document.body.innerText") or "")[:4000]))

    def close(self):
        self.sockets.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture
def browser(tmp_path):
    assert os.access(CHROMIUM, os.X_OK), (
        "%s is missing (Debian's chromium): run scripts/install-deps.sh" % CHROMIUM)
    b = Browser(str(tmp_path))
    yield b
    b.close()


def open_docs(b, server):
    """/docs loaded and its route list rendered from /openapi.json: one block
    per operation and tag (Swagger UI lists an operation under each tag)."""
    for domain in ("Network", "Log", "Runtime", "Page"):
        b.call(domain + ".enable")
    b.call("Page.navigate", url=server.url("/docs"))
    b.wait("document.querySelector(%r)" % EMBEDDINGS_OP, "POST /v1/embeddings listed")
    doc = requests.get(server.url("/openapi.json"), timeout=5).json()
    blocks = sum(len(op["tags"]) for item in doc["paths"].values()
                 for method, op in item.items() if method != "parameters")
    assert b.js("document.querySelectorAll('.opblock').length") == blocks
    title = b.js("document.querySelector('.info .title').innerText")
    assert "attnserve" in title, title


def page_problems(b, server):
    """What went wrong in the page: a request to another origin, a console
    error (a CSP refusal is one), an uncaught exception."""
    origin = urllib.parse.urlsplit(server.url("/")).netloc
    fetched = [e["params"]["request"]["url"] for e in b.events
               if e.get("method") == "Network.requestWillBeSent"]
    assert any(u.endswith("/openapi.json") for u in fetched), fetched
    assert any("/docs/swagger-ui-bundle.js" in u for u in fetched), fetched
    problems = [u for u in fetched if not u.startswith("data:")
                and urllib.parse.urlsplit(u).netloc != origin]
    problems += [(e["params"]["entry"]["text"], e["params"]["entry"].get("url"))
                 for e in b.events
                 if e.get("method") == "Log.entryAdded"
                 and e["params"]["entry"]["level"] == "error"]
    problems += [e["params"]["exceptionDetails"].get("text", "") for e in b.events
                 if e.get("method") == "Runtime.exceptionThrown"]
    return problems


OP = "document.querySelector(%r)" % EMBEDDINGS_OP
ANSWER_ROW = OP + ".querySelector('.live-responses-table tr.response %s')"


def type_into(b, selector, text):
    """Focus, select all, type: the keystrokes' input events, as a user's."""
    b.js("document.querySelector(%r).focus()" % selector)
    b.js("document.querySelector(%r).select()" % selector)
    b.call("Input.insertText", text=text)


def execute(b):
    """Execute on the opened, tried-out POST /v1/embeddings: the status and
    the body the page shows."""
    b.js(OP + ".querySelector('button.execute').click()")
    status = b.wait(ANSWER_ROW % ".response-col_status" + "?.innerText.trim()",
                    "the answer's status shown")
    shown = b.wait(ANSWER_ROW % ".response-col_description pre" + "?.innerText",
                   "the answer's body shown")
    return status, shown


def test_docs_page_sends_a_request_and_shows_its_answer(server, browser):
    b = browser
    open_docs(b, server)

    # Opened: its body's example and, on the Schema tab, every field.
    b.js("document.querySelector('%s .opblock-summary-control').click()" % EMBEDDINGS_OP)
    op = OP
    b.wait(op + ".querySelector('.opblock-body .body-param__example')",
           "the request body's example shown")
    assert "The food was delicious" in b.js(op + ".querySelector('.body-param__example')"
                                            ".innerText")
    b.js("[...%s.querySelectorAll('.tab button, .tablinks')]"
         ".find(t => t.innerText.trim() === 'Schema').click()" % op)
    b.wait(op + ".querySelector('.model-box')", "the request body's schema shown")
    # Expand the schema so its properties are on the page.
    b.js("%s.querySelectorAll('.model-box .model-toggle.collapsed')"
         ".forEach(t => t.click())" % op)
    fields = b.wait(op + ".querySelector('.model-box').innerText.includes('encoding_format') && "
                    + op + ".querySelector('.model-box').innerText",
                    "the schema's fields listed")
    for name in ("input", "model", "encoding_format", "dimensions", "user"):
        assert name in fields, (name, fields)
    text = b.js(op + ".innerText")
    assert "$ref" not in text and "#/components" not in text, text[:4000]
    assert not b.js("!!document.querySelector('.errors-wrapper')"), \
        b.js("document.querySelector('.errors-wrapper').innerText")

    # Try it out: the body typed in (select all, type), then Execute.
    b.js(op + ".querySelector('.try-out__btn').click()")
    b.wait(op + ".querySelector('textarea.body-param__text')", "the body editor shown")
    type_into(b, EMBEDDINGS_OP + " textarea.body-param__text", json.dumps(BODY))
    assert json.loads(b.js(op + ".querySelector('textarea.body-param__text').value")) == BODY
    status, shown = execute(b)
    assert status == "200", status
    answer = json.loads(shown)
    vector = answer["data"][0]["embedding"]
    assert len(vector) == 384 and all(isinstance(x, float) for x in vector)
    # The very answer the service gives that body directly.
    direct = requests.post(server.url("/v1/embeddings"), data=json.dumps(BODY), headers=JSON,
                           timeout=30).json()["data"][0]["embedding"]
    assert max(abs(a - b_) for a, b_ in zip(vector, direct)) < 1e-6
    url = b.js(op + ".querySelector('.request-url pre').innerText").strip()
    assert url == server.url("/v1/embeddings"), url

    # Nothing from elsewhere, nothing refused by the page's CSP, no script error.
    assert page_problems(b, server) == []


def test_every_route_opens_with_its_schemas_resolved(server, browser):
    """Every operation opened, every schema tab shown and its models
    expanded: Swagger UI resolves each operation's references when it opens,
    and shows what it cannot resolve (a bad $ref, a missing schema) in its
    error box or as the raw reference."""
    b = browser
    open_docs(b, server)
    b.js("document.querySelectorAll('.opblock-summary-control').forEach(c => c.click())")
    # Each opening resolves the operation's part of the document: about 0.7 s
    # of the renderer's CPU each on an idle core, minutes on a loaded machine.
    b.wait("document.querySelectorAll('.opblock-body').length === "
           "document.querySelectorAll('.opblock').length", "every operation opened",
           timeout=300)
    b.js("document.querySelectorAll('.tab button, .tablinks')"
         ".forEach(t => { if (t.innerText.trim() === 'Schema') t.click(); })")
    # Nested models open one level a click.
    for _ in range(4):
        b.js("document.querySelectorAll('.model-toggle.collapsed').forEach(t => t.click())")
        time.sleep(0.2)
    text = b.js("document.body.innerText")
    assert "encoding_format" in text and "documents" in text
    for bad in ("$ref", "#/components", "Resolver error", "Could not resolve"):
        assert bad not in text, (bad, text[max(text.find(bad) - 400, 0):text.find(bad) + 400])
    assert not b.js("!!document.querySelector('.errors-wrapper')"), \
        b.js("document.querySelector('.errors-wrapper').innerText")
    assert page_problems(b, server) == []


def test_docs_page_sends_the_key_entered_under_authorize(start_server, browser):
    """With a key configured, Try it out is 401 until the key is entered under
    Authorize; then the page sends it (Authorization: Bearer) and gets 200."""
    s = start_server(env={"ATTNSERVE_API_KEY": "docs-page-key"})
    b = browser
    open_docs(b, s)
    b.js(OP + ".querySelector('.opblock-summary-control').click()")
    b.wait(OP + ".querySelector('.try-out__btn')", "the operation opened")
    b.js(OP + ".querySelector('.try-out__btn').click()")
    b.wait(OP + ".querySelector('textarea.body-param__text')", "the body editor shown")
    status, shown = execute(b)
    assert status == "401", (status, shown)

    b.js("document.querySelector('.auth-wrapper button.authorize').click()")
    b.wait("document.querySelector('#auth-bearer-value')", "the Authorize dialog shown")
    type_into(b, "#auth-bearer-value", "docs-page-key")
    b.js("document.querySelector('.auth-btn-wrapper button.authorize').click()")
    b.wait("document.querySelector('.auth-btn-wrapper button.btn-done')", "the key applied")
    b.js("document.querySelector('.auth-btn-wrapper button.btn-done').click()")
    b.js(OP + ".querySelector('button.btn-clear')?.click()")
    b.wait("!" + OP + ".querySelector('.live-responses-table')", "the old answer cleared")
    status, shown = execute(b)
    assert status == "200", (status, shown)
    assert len(json.loads(shown)["data"][0]["embedding"]) == 384
    curl = b.js(OP + ".querySelector('.curl-command').innerText")
    assert "Authorization: Bearer docs-page-key" in curl, curl
    # The first Execute's 401 is the one console error.
    refused = ("Failed to load resource: the server responded with a status of 401 "
               "(Unauthorized)", s.url("/v1/embeddings"))
    assert [p for p in page_problems(b, s) if p != refused] == []
