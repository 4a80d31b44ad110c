"""Checks of the deployment files against what the service depends on.

Run: /usr/bin/python3 -m pytest tests/deploy (Debian: python3-pytest,
python3-yaml, python3-requests; haproxy for the real config check).

Every manifest is parsed; then the fields the service relies on are checked
against each other and against the Dockerfile: probe paths and ports, the
config mount, the grace period against drain_timeout_s, the memory limit
against the worst case that /info reports (from a real start of build/attnserve
with the ConfigMap's config, when the binary and the model are there), and
haproxy.cfg is validated by haproxy itself.
"""
import json
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEPLOY = os.path.join(ROOT, "deploy")
K8S = os.path.join(DEPLOY, "k8s")
BIN = os.environ.get("ATTNSERVE_BIN", os.path.join(ROOT, "build", "attnserve"))
MODEL = os.path.join(ROOT, "models", "all-MiniLM-L6-v2")
DEFAULT_DRAIN_TIMEOUT_S = 20  # server/config.c; checked against --print-config below


# ---- loading -----------------------------------------------------------------------

def load_k8s():
    docs = {}
    for name in sorted(os.listdir(K8S)):
        if not name.endswith((".yaml", ".yml")):
            continue
        with open(os.path.join(K8S, name)) as f:
            for doc in yaml.safe_load_all(f):
                if doc is None:
                    continue
                assert isinstance(doc, dict) and "kind" in doc, "%s: not a manifest" % name
                docs.setdefault(doc["kind"], []).append((name, doc))
    return docs


@pytest.fixture(scope="module")
def k8s():
    return load_k8s()


def one(k8s, kind):
    items = k8s.get(kind, [])
    assert len(items) == 1, "expected one %s in deploy/k8s, found %d" % (kind, len(items))
    return items[0][1]


@pytest.fixture(scope="module")
def deployment(k8s):
    return one(k8s, "Deployment")


@pytest.fixture(scope="module")
def container(deployment):
    cs = deployment["spec"]["template"]["spec"]["containers"]
    matches = [c for c in cs if c["name"] == "attnserve"]
    assert len(matches) == 1, "no container named attnserve"
    return matches[0]


@pytest.fixture(scope="module")
def dockerfile():
    with open(os.path.join(ROOT, "Dockerfile")) as f:
        text = f.read()
    # Join continuation lines; drop comments.
    text = re.sub(r"\\\n", " ", text)
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.strip().startswith("#")]
    return lines


def df_instr(lines, instr):
    return [l[len(instr):].strip() for l in lines if l.upper().startswith(instr + " ")]


def runtime_stage(lines):
    starts = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    return lines[starts[-1]:]


def pod_spec(deployment):
    return deployment["spec"]["template"]["spec"]


def config_map_file(k8s, container, pod):
    """(path passed by --config, the ConfigMap key's text) for a container of
    the pod spec `pod` (a Deployment's template or an InferenceService's
    predictor), the ConfigMap looked up in deploy/k8s."""
    args = container.get("args", []) + container.get("command", [])
    path = None
    for i, a in enumerate(args):
        if a == "--config" and i + 1 < len(args):
            path = args[i + 1]
        elif a.startswith("--config="):
            path = a.split("=", 1)[1]
    assert path, "the container passes no --config PATH"
    mounts = container.get("volumeMounts", [])
    vols = {v["name"]: v for v in pod.get("volumes", [])}
    for m in mounts:
        mp = m["mountPath"].rstrip("/")
        vol = vols.get(m["name"], {})
        if "configMap" not in vol:
            continue
        if m.get("subPath"):
            if mp != path:
                continue
            key = m["subPath"]
        else:
            if os.path.dirname(path) != mp:
                continue
            key = os.path.basename(path)
            items = vol["configMap"].get("items")
            if items:
                key = next((it["key"] for it in items if it["path"] == key), None)
        cms = [d for _, d in k8s.get("ConfigMap", [])
               if d["metadata"]["name"] == vol["configMap"]["name"]]
        assert cms, "ConfigMap %s is not in deploy/k8s" % vol["configMap"]["name"]
        data = cms[0].get("data", {})
        assert key in data, "ConfigMap %s has no key %s (the file --config %s names)" % (
            vol["configMap"]["name"], key, path)
        return path, data[key]
    raise AssertionError("no ConfigMap volume is mounted where --config %s points" % path)


def parse_quantity(q):
    """Kubernetes memory quantity to bytes."""
    m = re.fullmatch(r"([0-9.]+)([KMGTPE]i?|[kmgtpe])?", str(q))
    assert m, "bad quantity %r" % q
    mult = {None: 1, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]
    return float(m.group(1)) * mult


def env_value(container, name):
    for e in container.get("env", []):
        if e["name"] == name:
            return e.get("value", e.get("valueFrom"))
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def have_binary():
    return os.access(BIN, os.X_OK)


def binary_serves():
    """The binary runs and its --help lists the settings and their env names."""
    if not have_binary():
        return False
    r = subprocess.run([BIN, "--help"], capture_output=True, text=True, timeout=10)
    return r.returncode == 0 and "ATTNSERVE_" in (r.stdout + r.stderr)


# ---- every file parses ----------------------------------------------------------------

def test_every_manifest_parses_and_kinds_present(k8s):
    for kind in ("Deployment", "Service", "HorizontalPodAutoscaler", "PodDisruptionBudget",
                 "ConfigMap"):
        assert kind in k8s, "deploy/k8s has no %s" % kind
    with open(os.path.join(K8S, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    listed = set(kust["resources"])
    on_disk = {n for n in os.listdir(K8S) if n.endswith(".yaml") and n != "kustomization.yaml"}
    assert listed == on_disk, "kustomization resources %s differ from the files %s" % (
        sorted(listed), sorted(on_disk))


def test_compose_parses():
    with open(os.path.join(DEPLOY, "compose.yaml")) as f:
        c = yaml.safe_load(f)
    assert "attnserve" in c["services"]


# ---- Deployment against the container and the service ---------------------------------

def test_probes_match_container_port(container, dockerfile):
    check_probes(container, dockerfile)


def check_probes(container, dockerfile):
    """Probe paths and ports against the container's ports, the image's
    EXPOSE and ATTNSERVE_PORT; readiness faster than liveness."""
    ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
    exposed = {int(p.split("/")[0]) for e in df_instr(dockerfile, "EXPOSE") for p in e.split()}
    assert set(ports.values()) <= exposed, "containerPort %s not EXPOSEd (%s)" % (ports, exposed)
    port_env = env_value(container, "ATTNSERVE_PORT")
    if port_env is not None:
        assert int(port_env) in ports.values(), "ATTNSERVE_PORT %s is not the containerPort" % (
            port_env)
    else:
        assert 8080 in ports.values(), "no ATTNSERVE_PORT and containerPort is not the default 8080"

    def probe_port(p):
        port = p["httpGet"]["port"]
        return ports[port] if isinstance(port, str) else port

    rp, lp = container["readinessProbe"], container["livenessProbe"]
    assert rp["httpGet"]["path"] == "/ready"
    assert lp["httpGet"]["path"] == "/health"
    assert probe_port(rp) in ports.values() and probe_port(lp) in ports.values()
    if "startupProbe" in container:
        sp = container["startupProbe"]
        assert sp["httpGet"]["path"] in ("/health", "/ready")
        assert probe_port(sp) in ports.values()
    # Readiness must react faster than liveness: a draining pod leaves the
    # Service well before anything could restart it.
    assert (rp.get("periodSeconds", 10) * rp.get("failureThreshold", 3)
            < lp.get("periodSeconds", 10) * lp.get("failureThreshold", 3))


def test_service_targets_container_port(k8s, deployment, container):
    svc = one(k8s, "Service")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for k, v in svc["spec"]["selector"].items():
        assert labels.get(k) == v, "Service selector %s=%s does not match the pods" % (k, v)
    names = {p.get("name"): p["containerPort"] for p in container["ports"]}
    for p in svc["spec"]["ports"]:
        t = p["targetPort"]
        assert (t in names) if isinstance(t, str) else (t in names.values())


def test_config_mount_matches_config_arg(k8s, container, deployment):
    path, text = config_map_file(k8s, container, pod_spec(deployment))
    cfg = json.loads(text)
    assert isinstance(cfg, dict)
    # The image's own default is the same path, so the Dockerfile's CMD and the
    # Deployment's args agree.
    assert path == "/etc/attnserve/attnserve.json"


def test_config_accepted_by_the_binary(k8s, container, deployment):
    if not binary_serves():
        pytest.fail("build/attnserve is missing or its --help fails: make first")
    _, text = config_map_file(k8s, container, pod_spec(deployment))
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        f.write(text)
        f.flush()
        r = subprocess.run([BIN, "--config", f.name, "--print-config"], capture_output=True,
                           text=True, timeout=10)
    assert r.returncode == 0, "attnserve refuses the ConfigMap's config: " + r.stderr
    eff = json.loads(r.stdout)
    for k, v in json.loads(text).items():
        assert eff[k] == v, "setting %s: file says %r, effective %r" % (k, v, eff[k])


def drain_timeout(k8s, container, pod):
    env = env_value(container, "ATTNSERVE_DRAIN_TIMEOUT_S")
    if env is not None:
        return int(env)
    _, text = config_map_file(k8s, container, pod)
    return int(json.loads(text).get("drain_timeout_s", DEFAULT_DRAIN_TIMEOUT_S))


def test_default_drain_timeout_is_what_this_test_assumes():
    if not binary_serves():
        pytest.fail("build/attnserve is not built: make first")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    r = subprocess.run([BIN, "--print-config"], capture_output=True, text=True, timeout=10,
                       env=env, cwd=tempfile.gettempdir())
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["drain_timeout_s"] == DEFAULT_DRAIN_TIMEOUT_S


def test_grace_period_exceeds_drain(k8s, container, deployment):
    check_grace_period(k8s, pod_spec(deployment), container)
    # The rollout never takes a ready pod away before its replacement is ready.
    ru = deployment["spec"]["strategy"]["rollingUpdate"]
    assert ru["maxUnavailable"] in (0, "0%")


def check_grace_period(k8s, pod, container):
    grace = pod.get("terminationGracePeriodSeconds", 30)
    pre = 0
    cmd = container.get("lifecycle", {}).get("preStop", {}).get("exec", {}).get("command", [])
    if cmd[:1] == ["sleep"]:
        pre = float(cmd[1])
    pre += container.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds", 0)
    drain = drain_timeout(k8s, container, pod)
    assert grace > pre + drain, (
        "terminationGracePeriodSeconds %s must exceed preStop %s s + drain_timeout_s %s s"
        % (grace, pre, drain))


def test_security_matches_image(deployment, container, dockerfile):
    check_security(pod_spec(deployment), container, dockerfile)


def check_security(pod, container, dockerfile):
    users = df_instr(runtime_stage(dockerfile), "USER")
    assert users, "the runtime stage sets no USER"
    uid = int(users[-1].split(":")[0])
    assert uid != 0
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc.get("runAsUser", uid) == uid
    csc = container["securityContext"]
    assert csc["allowPrivilegeEscalation"] is False
    assert csc.get("readOnlyRootFilesystem") is True


def test_threads_follow_cpu_limit(container):
    check_threads_follow_cpu_limit(container)


def check_threads_follow_cpu_limit(container):
    v = env_value(container, "ATTNSERVE_THREADS")
    assert isinstance(v, dict) and v["resourceFieldRef"]["resource"] == "limits.cpu", (
        "ATTNSERVE_THREADS should come from limits.cpu so threads match the CPUs the pod has")
    v = env_value(container, "ATTNSERVE_CODEC_WORKERS")
    assert isinstance(v, dict) and v["resourceFieldRef"]["resource"] == "limits.cpu", (
        "ATTNSERVE_CODEC_WORKERS should come from limits.cpu, not the node's core count")
    assert "cpu" in container["resources"]["limits"]


def test_hpa_and_pdb_fit_the_deployment(k8s, deployment):
    hpa, pdb = one(k8s, "HorizontalPodAutoscaler"), one(k8s, "PodDisruptionBudget")
    ref = hpa["spec"]["scaleTargetRef"]
    assert ref["kind"] == "Deployment" and ref["name"] == deployment["metadata"]["name"]
    assert hpa["spec"]["minReplicas"] >= 2
    assert hpa["spec"]["maxReplicas"] >= hpa["spec"]["minReplicas"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    for k, v in pdb["spec"]["selector"]["matchLabels"].items():
        assert labels.get(k) == v
    if "maxUnavailable" in pdb["spec"]:
        assert int(pdb["spec"]["maxUnavailable"]) < hpa["spec"]["minReplicas"]
    else:
        assert int(pdb["spec"]["minAvailable"]) < hpa["spec"]["minReplicas"]


# ---- memory: the limit covers the worst case /info reports -----------------------------

def worst_case_bytes(info):
    """The worst-case memory figure in /info, in bytes, wherever it sits."""
    found = []

    def walk(node, path):
        if isinstance(node, dict):
            for k, v in node.items():
                walk(v, path + [k])
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            key = "_".join(path).lower()
            if "worst" in key and "bytes" in key:
                found.append((key, node))
    walk(info, [])
    assert found, "/info reports no worst-case memory (a key with 'worst' and 'bytes'): %s" % (
        json.dumps(info)[:500])
    # The total when several parts are listed.
    found.sort(key=lambda kv: ("total" not in kv[0], -kv[1]))
    return found[0]


@pytest.fixture(scope="module")
def info_with_configmap(k8s, container, deployment):
    """/info of the real binary started with the ConfigMap's config."""
    _, text = config_map_file(k8s, container, pod_spec(deployment))
    return info_of(text, container)


def info_of(text, container, paths=None):
    """(/info, resident bytes) of the real binary started with the config
    file `text` and the container's environment (its plain values, each
    path in `paths` mapped to this machine's), with as many threads and
    codec workers as its CPU limit gives it."""
    if not binary_serves():
        pytest.fail("build/attnserve is not built: make first")
    if not os.path.exists(os.path.join(MODEL, "model.safetensors")):
        pytest.fail("no model: make model")
    import requests
    cfg = json.loads(text)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "attnserve.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        port = free_port()
        limits = container["resources"]["limits"]
        threads = max(1, int(float(str(limits["cpu"]).rstrip("m")) / (1000 if str(
            limits["cpu"]).endswith("m") else 1) + 0.999))
        env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
        for e in container.get("env", []):
            if "value" in e:
                v = e["value"]
                for there, here in (paths or {}).items():
                    v = v.replace(there, here)
                env[e["name"]] = v
        log = open(os.path.join(d, "log"), "w+")
        # The CPU image installs the binary alone; the build tree keeps the
        # plugins beside it (a refused cuda plugin holds cuBLASLt resident),
        # which the deployed process never loads.
        # The image's ATTNSERVE_MODEL, here, unless the container sets its own.
        model = [] if "ATTNSERVE_MODEL" in env else ["--model=%s" % MODEL]
        p = subprocess.Popen([BIN, "--config", path, "--host=127.0.0.1", "--port=%d" % port,
                              "--threads=%d" % threads, "--codec_workers=%d" % threads,
                              "--plugin_dir=none"] + model,
                             stdout=log, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            url = "http://127.0.0.1:%d" % port
            deadline = time.monotonic() + 60
            while True:
                if p.poll() is not None:
                    log.seek(0)
                    raise AssertionError("attnserve exited %s: %s" % (p.returncode, log.read()))
                try:
                    if requests.get(url + "/ready", timeout=1).status_code == 200:
                        break
                except requests.RequestException:
                    pass
                assert time.monotonic() < deadline, "attnserve not ready in 60 s"
                time.sleep(0.2)
            info = requests.get(url + "/info", timeout=5).json()
            rss = None
            m = re.search(r"^process_resident_memory_bytes\s+(\S+)",
                          requests.get(url + "/metrics", timeout=5).text, re.M)
            if m:
                rss = float(m.group(1))
            return info, rss
        finally:
            p.terminate()
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            log.close()


def test_memory_limit_covers_worst_case(container, info_with_configmap):
    check_memory_limit(container, *info_with_configmap)


def check_memory_limit(container, info, rss):
    key, worst = worst_case_bytes(info)
    res = container["resources"]
    limit = parse_quantity(res["limits"]["memory"])
    request = parse_quantity(res["requests"]["memory"])
    print("worst case (%s) %.0f MiB, idle RSS %s MiB, limit %.0f MiB" % (
        key, worst / 2**20, "%.0f" % (rss / 2**20) if rss else "?", limit / 2**20))
    assert request <= limit
    # 10% headroom for the allocator, libraries and stacks beyond the computed figure.
    assert limit >= 1.10 * worst, "memory limit %.0f MiB < worst case %.0f MiB + 10%%" % (
        limit / 2**20, worst / 2**20)
    if rss:
        assert limit >= 1.10 * rss


# ---- compose ------------------------------------------------------------------------------

def test_compose_fields():
    with open(os.path.join(DEPLOY, "compose.yaml")) as f:
        svc = yaml.safe_load(f)["services"]["attnserve"]
    env = svc.get("environment", {})
    port = int(env.get("ATTNSERVE_PORT", 8080))
    assert any(str(p).endswith(":%d" % port) for p in svc["ports"]), "no port maps to %d" % port
    drain = int(env.get("ATTNSERVE_DRAIN_TIMEOUT_S", DEFAULT_DRAIN_TIMEOUT_S))
    grace = svc["stop_grace_period"]
    m = re.fullmatch(r"(\d+)s", grace)
    assert m and int(m.group(1)) > drain, "stop_grace_period %s <= drain %d s" % (grace, drain)
    assert svc.get("stop_signal", "SIGTERM") == "SIGTERM"
    assert svc["healthcheck"]["test"][-1] == "/usr/local/bin/attnserve-healthcheck"
    targets = [v.split(":")[1] for v in svc["volumes"]]
    assert "/models/all-MiniLM-L6-v2" in targets


# ---- Dockerfile ---------------------------------------------------------------------------

def test_dockerfile(dockerfile):
    froms = df_instr(dockerfile, "FROM")
    assert len(froms) >= 2, "not multi-stage"
    args = " ".join(df_instr(dockerfile, "ARG"))
    assert "debian:bookworm-slim" in args or all("bookworm-slim" in f for f in froms)
    text = "\n".join(dockerfile)
    assert "scripts/install-deps.sh" in text, "build stage does not use scripts/install-deps.sh"
    rt = runtime_stage(dockerfile)
    rt_text = "\n".join(rt)
    assert "-dev" not in rt_text and "build-essential" not in rt_text, "-dev packages at runtime"
    # The runtime packages are read from the binary (runtime-packages.sh) and
    # the library paths compared with the build stage's.
    assert "runtime-packages.sh build/attnserve" in text
    assert "$(cat /usr/share/attnserve/runtime-packages)" in rt_text
    assert "diff -u /usr/share/attnserve/libraries" in rt_text
    ep = df_instr(rt, "ENTRYPOINT")
    assert ep and ep[-1].startswith("["), "ENTRYPOINT must be exec form so SIGTERM reaches it"
    assert json.loads(ep[-1])[0] == "/usr/local/bin/attnserve"
    assert df_instr(rt, "STOPSIGNAL") == ["SIGTERM"]
    hc = df_instr(rt, "HEALTHCHECK")
    assert hc and "attnserve-healthcheck" in hc[-1]
    with open(os.path.join(DEPLOY, "docker", "healthcheck.sh")) as f:
        assert "GET /health " in f.read()
    cmd = json.loads(df_instr(rt, "CMD")[-1])
    assert cmd == ["--config", "/etc/attnserve/attnserve.json"]
    envs = " ".join(df_instr(rt, "ENV"))
    assert "ATTNSERVE_MODEL=/models/all-MiniLM-L6-v2" in envs
    assert "ATTNSERVE_HOST=0.0.0.0" in envs


def test_runtime_packages_of_the_real_binary():
    if not binary_serves():
        pytest.fail("build/attnserve is not built: make first")
    r = subprocess.run([os.path.join(DEPLOY, "docker", "runtime-packages.sh"), BIN],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    pkgs = r.stdout.split()
    for p in ("libmicrohttpd12", "libjansson4", "libuv1"):
        assert p in pkgs, "runtime packages %s lack %s" % (pkgs, p)
    assert not [p for p in pkgs if p.endswith("-dev")], pkgs


def test_dockerignore():
    with open(os.path.join(ROOT, ".dockerignore")) as f:
        pats = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    for p in (".git", "build", "build-*", "models/.cache"):
        assert p in pats, ".dockerignore lacks %s" % p


# ---- haproxy -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def haproxy_cfg():
    with open(os.path.join(DEPLOY, "haproxy.cfg")) as f:
        return f.read()


def section(cfg, kind, name):
    out, cur = [], None
    for line in cfg.splitlines():
        m = re.match(r"^(\S+)\s*(\S*)", line)
        if m and not line.startswith((" ", "\t")):
            cur = (m.group(1), m.group(2))
            continue
        if cur == (kind, name) and line.strip() and not line.strip().startswith("#"):
            out.append(line.strip())
    return out


def test_haproxy_fields(haproxy_cfg):
    be = section(haproxy_cfg, "backend", "attnserve")
    de = section(haproxy_cfg, "defaults", "")
    both = be + de
    assert "option httpchk GET /ready" in be
    assert "http-check expect status 200" in be
    assert "balance leastconn" in be
    assert any(re.fullmatch(r"retries [1-9]\d*", l) for l in both)
    assert any(l.startswith("option redispatch") for l in both)
    ro = [l for l in both if l.startswith("retry-on ")]
    assert ro and {"conn-failure", "empty-response", "503"} <= set(ro[-1].split()[1:])
    servers = [l for l in be if l.startswith("server ")]
    assert len(servers) >= 2
    ds = " ".join(l for l in be if l.startswith("default-server"))
    assert all("check" in (s + " " + ds).split() for s in servers), "servers without check"
    timeouts = {l.split()[1]: l.split()[2] for l in de if l.startswith("timeout ")}
    secs = lambda v: float(v[:-2]) / 1000 if v.endswith("ms") else float(v.rstrip("s"))
    # Longer than request_timeout_ms (30 s default), so the service's 504 arrives first.
    assert secs(timeouts["server"]) > 30
    st = section(haproxy_cfg, "frontend", "stats")
    main_bind = [l for l in section(haproxy_cfg, "frontend", "attnserve") if l.startswith("bind")]
    st_bind = [l for l in st if l.startswith("bind")]
    assert "stats enable" in st and st_bind and st_bind[0].split(":")[-1] != main_bind[0].split(
        ":")[-1], "the stats page needs its own port"


def test_haproxy_validates(haproxy_cfg):
    if not shutil.which("haproxy"):
        pytest.fail("haproxy is not installed (apt-get install haproxy)")
    r = subprocess.run(["haproxy", "-c", "-f", os.path.join(DEPLOY, "haproxy.cfg")],
                       capture_output=True, text=True, timeout=30)
    out = r.stdout + r.stderr
    assert r.returncode == 0 and "Configuration file is valid" in out, out
    # The only warnings allowed: the example server names do not resolve here.
    warnings = [l for l in out.splitlines() if "[WARNING]" in l and "could not resolve" not in l]
    assert not warnings, "\n".join(warnings)


# ---- Kubernetes schemas ------------------------------------------------------------------

# The oldest and newest Kubernetes versions the manifests are meant for.
K8S_VERSIONS = ("1.27.0", "1.37.0")

VALIDATE = r"""
import sys, yaml, kubernetes_validate as kv
bad = 0
for path in sys.argv[2:]:
    for doc in yaml.safe_load_all(open(path)):
        if not doc or doc.get("kind") == "Kustomization":  # kustomize's file, not an API object
            continue
        try:
            kv.validate(doc, sys.argv[1], strict=True)
        except kv.ValidationError as e:
            bad += 1
            print("%s: %s/%s: %s" % (path, doc["kind"], doc["metadata"]["name"], e))
sys.exit(1 if bad else 0)
"""


def test_k8s_schemas_strict():
    """Every manifest against the official OpenAPI schemas, rejecting unknown
    fields (typos), with the kubernetes-validate package. tests/deploy/run.sh
    installs it from PyPI into a cache outside the repository and names it in
    ATTNSERVE_DEPLOY_PYDEPS_DIR; it runs in a process of its own, so its
    pinned dependencies never mix with the ones pytest has loaded."""
    pydeps = os.environ.get("ATTNSERVE_DEPLOY_PYDEPS_DIR")
    if not pydeps:
        pytest.fail("kubernetes-validate not installed (tests/deploy/run.sh installs it)")
    files = sorted(os.path.join(K8S, n) for n in os.listdir(K8S) if n.endswith(".yaml"))
    env = dict(os.environ, PYTHONPATH=pydeps)
    for version in K8S_VERSIONS:
        r = subprocess.run(["/usr/bin/python3", "-c", VALIDATE, version] + files,
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, "against Kubernetes %s:\n%s%s" % (version, r.stdout, r.stderr)


# ---- the image's HEALTHCHECK script ---------------------------------------------------------

def run_healthcheck(port, host=None):
    env = {"PATH": "/usr/bin:/bin", "ATTNSERVE_PORT": str(port)}
    if host:
        env["ATTNSERVE_HOST"] = host
    return subprocess.run(["bash", os.path.join(DEPLOY, "docker", "healthcheck.sh")],
                          env=env, capture_output=True, text=True, timeout=10).returncode


def test_healthcheck_script_fails_without_a_server():
    assert run_healthcheck(free_port()) != 0


def test_healthcheck_script_fails_on_non_200():
    """A listener that answers 503 is unhealthy."""
    import http.server
    import threading

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(503 if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        assert run_healthcheck(srv.server_address[1], "0.0.0.0") != 0
    finally:
        srv.shutdown()
        srv.server_close()


def test_healthcheck_script_passes_on_the_real_binary():
    if not binary_serves():
        pytest.fail("build/attnserve is not built: make first")
    import requests
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    p = subprocess.Popen([BIN, "--host=127.0.0.1", "--port=%d" % port, "--model=%s" % MODEL],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while True:
            assert p.poll() is None, "attnserve exited %s" % p.returncode
            try:
                if requests.get("http://127.0.0.1:%d/health" % port, timeout=1).ok:
                    break
            except requests.RequestException:
                pass
            assert time.monotonic() < deadline
            time.sleep(0.2)
        assert run_healthcheck(port, "127.0.0.1") == 0
        assert run_healthcheck(port, "0.0.0.0") == 0
    finally:
        p.terminate()
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
