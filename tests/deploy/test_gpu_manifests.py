"""The GPU variant of the Kubernetes manifests (deploy/k8s/gpu: a kustomize
overlay of deploy/k8s) and the Dockerfile's runtime-cuda target, checked as
test_manifests.py checks the base: the overlay's patch is applied to the base
Deployment with Kubernetes' strategic-merge rules for the fields it touches
(lists of named items merged by name, other lists replaced), and the result
is validated strictly against the official schemas and against what the GPU
image sets."""
import json
import os
import re
import subprocess
import tempfile

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "deploy", "k8s")
GPU = os.path.join(K8S, "gpu")
K8S_VERSIONS = ("1.27.0", "1.37.0")  # as test_manifests.py


def merge(base, patch):
    """Strategic merge for the shapes the overlay uses: maps merged key by key,
    lists whose items all carry "name" merged by name, other lists replaced
    (tolerations have no merge key in Kubernetes and are replaced too)."""
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    if (isinstance(base, list) and isinstance(patch, list) and patch
            and all(isinstance(x, dict) and "name" in x for x in base + patch)):
        out = [dict(x) for x in base]
        for item in patch:
            for i, x in enumerate(out):
                if x["name"] == item["name"]:
                    out[i] = merge(x, item)
                    break
            else:
                out.append(item)
        return out
    return patch


@pytest.fixture(scope="module")
def gpu_deployment():
    with open(os.path.join(GPU, "kustomization.yaml")) as f:
        kust = yaml.safe_load(f)
    assert kust["resources"] == ["../"], kust["resources"]
    base = [d for d in yaml.safe_load_all(open(os.path.join(K8S, "deployment.yaml"))) if d]
    assert len(base) == 1 and base[0]["kind"] == "Deployment"
    doc = base[0]
    for p in kust["patches"]:
        patch = yaml.safe_load(open(os.path.join(GPU, p["path"])))
        assert (patch["kind"], patch["metadata"]["name"]) == ("Deployment", doc["metadata"]["name"])
        doc = merge(doc, patch)
    return base[0], doc


def container(doc):
    cs = doc["spec"]["template"]["spec"]["containers"]
    assert len(cs) == 1
    return cs[0]


def env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def dockerfile_stage(name):
    text = re.sub(r"\\\n", " ", open(os.path.join(ROOT, "Dockerfile")).read())
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("#")]
    starts = [i for i, l in enumerate(lines) if l.upper().startswith("FROM ")]
    for n, i in enumerate(starts):
        if lines[i].split()[-1] == name:
            return lines[i:starts[n + 1] if n + 1 < len(starts) else len(lines)]
    pytest.fail("the Dockerfile has no stage %s" % name)


def test_gpu_patch_asks_for_a_gpu_and_the_cuda_engine(gpu_deployment):
    base, doc = gpu_deployment
    check_gpu_container(container(base), container(doc), doc["spec"]["template"]["spec"])


def check_gpu_container(b, c, pod):
    """The GPU variant's container c against the CPU variant's b: one GPU,
    the cuda engine, and everything else the CPU variant relies on kept."""
    res = c["resources"]
    assert res["limits"]["nvidia.com/gpu"] == "1"
    # Extended resources cannot be overcommitted: requests equal limits.
    assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"]
    assert res["requests"] == res["limits"], "keep Guaranteed QoS as the base does"
    assert c["image"].endswith("-cuda")
    e = env(c)
    assert e["ATTNSERVE_ENGINE"] == "cuda" and e["ATTNSERVE_PRECISION"] == "bf16"
    # What the base relies on survives the patch.
    for k in ("startupProbe", "readinessProbe", "livenessProbe", "lifecycle", "securityContext",
              "volumeMounts", "args", "ports"):
        assert c[k] == b[k], k
    assert env(b).items() <= e.items()
    tol = pod["tolerations"]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in tol


def test_gpu_patch_matches_the_gpu_image(gpu_deployment):
    _, doc = gpu_deployment
    check_gpu_image(container(doc))


def check_gpu_image(c):
    """The GPU image (the Dockerfile's runtime-cuda) sets what c relies on."""
    stage = dockerfile_stage("runtime-cuda")
    assert stage[0].startswith("FROM ${CUDA_RUNTIME_IMAGE}")
    text = open(os.path.join(ROOT, "Dockerfile")).read()
    assert re.search(r"ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:\S+-runtime-", text)
    envs = " ".join(l for l in stage if l.upper().startswith("ENV "))
    m = re.search(r"ATTNSERVE_PLUGIN_DIR=(\S+)", envs)
    assert m, "runtime-cuda sets no ATTNSERVE_PLUGIN_DIR"
    assert env(c)["ATTNSERVE_PLUGIN_DIR"] == m.group(1)
    assert any("engines/cuda.so" in l for l in dockerfile_stage("build-cuda"))
    # The same entrypoint, command, user and health check as the CPU image.
    cpu = dockerfile_stage("runtime")
    for instr in ("ENTRYPOINT", "CMD", "USER", "STOPSIGNAL", "HEALTHCHECK", "EXPOSE"):
        pick = [l for l in stage if l.upper().startswith(instr + " ")]
        assert pick and pick == [l for l in cpu if l.upper().startswith(instr + " ")], instr
    assert json.loads([l for l in stage if l.startswith("CMD ")][0][4:]) == c["args"]


def test_gpu_deployment_schemas_strict(gpu_deployment):
    pydeps = os.environ.get("ATTNSERVE_DEPLOY_PYDEPS_DIR")
    if not pydeps:
        pytest.fail("kubernetes-validate not installed (tests/deploy/run.sh installs it)")
    from test_manifests import VALIDATE
    _, doc = gpu_deployment
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as f:
        yaml.safe_dump(doc, f)
        f.flush()
        for version in K8S_VERSIONS:
            r = subprocess.run(["/usr/bin/python3", "-c", VALIDATE, version, f.name],
                               capture_output=True, text=True, timeout=120,
                               env=dict(os.environ, PYTHONPATH=pydeps))
            assert r.returncode == 0, "against Kubernetes %s:\n%s%s" % (version, r.stdout, r.stderr)
