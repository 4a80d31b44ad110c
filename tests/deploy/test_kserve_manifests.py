"""The KServe InferenceServices (deploy/kserve, and its GPU overlay
deploy/kserve/gpu) against KServe's CRD schema and against what the service
depends on.

Schema: tests/deploy/kserve/inferenceservice.v1beta1.schema.json.gz is KServe's
own openAPIV3Schema for serving.kserve.io/v1beta1 InferenceService, trimmed
(its $comment and trim_crd.py say from which commit and what was cut; KServe
is Apache-2.0, LICENSE.kserve beside it). Validated with the pinned jsonschema
that tests/deploy/run.sh installs, made strict as `kubectl apply
--validate=strict` makes the API server: a field that the schema does not
name is refused, not pruned. The schema's own limits: it is a structural
schema only (no CEL rules in the parts kept), and KServe's admission webhook
checks more (storage URI schemes, names) - the KServe-specific checks below
cover what these files rely on. Negative cases prove the validation refuses
a broken manifest.

The container is then checked with the same helpers test_manifests.py uses
for the Deployment (probes, security, threads, grace period, config mount,
memory limit against /info's worst case from a real start) and the GPU
variant with test_gpu_manifests.py's; the PodDisruptionBudget beside it
against the official Kubernetes schemas, the labels KServe gives the pods,
and deploy/k8s's selectors (no overlap)."""
import copy
import gzip
import json
import os
import re
import subprocess

import pytest
import yaml

from test_gpu_manifests import check_gpu_container, check_gpu_image, gpu_deployment  # noqa: F401
from test_gpu_manifests import container as deployment_container
from test_manifests import K8S_VERSIONS, MODEL, ROOT
from test_manifests import VALIDATE as K8S_VALIDATE
from test_manifests import (check_grace_period, check_memory_limit, check_probes, check_security,
                            check_threads_follow_cpu_limit, config_map_file, dockerfile, info_of,
                            k8s, one)  # noqa: F401

KSERVE = os.path.join(ROOT, "deploy", "kserve")
SCHEMA = os.path.join(ROOT, "tests", "deploy", "kserve", "inferenceservice.v1beta1.schema.json.gz")
# Where KServe mounts a custom container's STORAGE_URI (constants.DefaultModelLocalMountPath).
KSERVE_MODEL_DIR = "/mnt/models"
# The container KServe mounts the model into and reads STORAGE_URI from.
KSERVE_CONTAINER = "kserve-container"


# ---- loading: the CPU InferenceService and the GPU overlay applied --------------------------

def kustomization(folder):
    with open(os.path.join(folder, "kustomization.yaml")) as f:
        return yaml.safe_load(f)


def load_kserve():
    """{kind: the one document of that kind} of deploy/kserve."""
    kust = kustomization(KSERVE)
    docs = {}
    for name in kust["resources"]:
        with open(os.path.join(KSERVE, name)) as f:
            for d in yaml.safe_load_all(f):
                if d:
                    assert d["kind"] not in docs, "two %s" % d["kind"]
                    docs[d["kind"]] = d
    on_disk = {n for n in os.listdir(KSERVE) if n.endswith(".yaml") and n != "kustomization.yaml"}
    assert set(kust["resources"]) == on_disk, (kust["resources"], on_disk)
    assert set(docs) == {"InferenceService", "PodDisruptionBudget"}, sorted(docs)
    return docs


def pointer(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]


def json_patch(doc, ops):
    """RFC 6902 add and replace, the two operations the overlay uses (a
    path's parent must exist; "-" appends to a list; replace needs the
    target to exist)."""
    doc = copy.deepcopy(doc)
    for op in ops:
        assert op["op"] in ("add", "replace"), op
        *parents, last = pointer(op["path"])
        node = doc
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            if last == "-":
                assert op["op"] == "add", op
                node.append(op["value"])
            elif op["op"] == "add":
                node.insert(int(last), op["value"])
            else:
                node[int(last)] = op["value"]
        else:
            assert op["op"] == "add" or last in node, "replace of a missing %s" % op["path"]
            node[last] = op["value"]
    return doc


def load_gpu(cpu):
    kust = kustomization(os.path.join(KSERVE, "gpu"))
    assert kust["resources"] == ["../"], kust["resources"]
    doc = cpu
    for p in kust["patches"]:
        t = p["target"]
        assert (t["group"] + "/" + t["version"], t["kind"], t["name"]) == (
            doc["apiVersion"], doc["kind"], doc["metadata"]["name"]), t
        doc = json_patch(doc, yaml.safe_load(p["patch"]))
    return doc


@pytest.fixture(scope="module")
def kserve():
    return load_kserve()


@pytest.fixture(scope="module")
def isvc(kserve):
    return kserve["InferenceService"]


@pytest.fixture(scope="module")
def isvc_gpu(isvc):
    return load_gpu(isvc)


def predictor(doc):
    return doc["spec"]["predictor"]


def pod_labels(doc):
    """The labels KServe gives the predictor's pods (buildObjectMeta in its
    components/predictor.go): the InferenceService's, the predictor's, its
    name and the component."""
    return dict(doc["metadata"].get("labels", {}), **predictor(doc).get("labels", {}),
                **{"serving.kserve.io/inferenceservice": doc["metadata"]["name"],
                   "component": "predictor"})


def kserve_container(doc):
    cs = predictor(doc)["containers"]
    assert len(cs) == 1, "one container: the model server"
    return cs[0]


# ---- KServe's CRD schema, strict ------------------------------------------------------------

VALIDATE = r"""
import gzip, json, sys
import jsonschema

def strict(node):
    # As the API server with strict field validation: an object schema that
    # lists its properties refuses others, unless it says to keep unknown
    # fields (or is a map, which has additionalProperties already).
    if isinstance(node, dict):
        if (node.get("type") == "object" and "properties" in node
                and "additionalProperties" not in node
                and not node.get("x-kubernetes-preserve-unknown-fields")):
            node["additionalProperties"] = False
        for v in node.values():
            strict(v)
    elif isinstance(node, list):
        for v in node:
            strict(v)

schema = json.load(gzip.open(sys.argv[1], "rt"))
strict(schema)
jsonschema.Draft7Validator.check_schema(schema)
v = jsonschema.Draft7Validator(schema)
out = []
for doc in json.load(sys.stdin):
    errs = sorted(v.iter_errors(doc), key=lambda e: list(e.absolute_path))
    out.append(["/".join(map(str, e.absolute_path)) + ": " + e.message for e in errs])
json.dump(out, sys.stdout)
"""


def schema_errors(docs):
    """For each document, the errors of KServe's schema made strict ([] when valid)."""
    pydeps = os.environ.get("ATTNSERVE_DEPLOY_PYDEPS_DIR")
    if not pydeps:
        pytest.fail("jsonschema not installed (tests/deploy/run.sh installs it)")
    r = subprocess.run(["/usr/bin/python3", "-c", VALIDATE, SCHEMA], input=json.dumps(docs),
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=pydeps))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def test_schema_is_kserves_with_its_source_and_licence():
    with gzip.open(SCHEMA, "rt") as f:
        schema = json.load(f)
    note = schema["$comment"]
    assert re.search(r"kserve/kserve at commit [0-9a-f]{40}", note), note
    assert "Apache License 2.0" in note
    with open(os.path.join(os.path.dirname(SCHEMA), "LICENSE.kserve")) as f:
        assert "Apache License" in f.read(2000)
    # What the manifests use is in the copy: a trimmed branch they needed
    # would make every check below fail, not pass.
    pred = schema["properties"]["spec"]["properties"]["predictor"]["properties"]
    for k in ("containers", "volumes", "minReplicas", "deploymentStrategy", "tolerations"):
        assert k in pred, k


def test_inferenceservices_valid_against_kserves_schema(isvc, isvc_gpu):
    errors = schema_errors([isvc, isvc_gpu])
    assert errors == [[], []], "\n".join(sum(errors, []))
    for doc in (isvc, isvc_gpu):
        assert (doc["apiVersion"], doc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
        # KServe names the Service and the host after it: a DNS-1035 label.
        assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", doc["metadata"]["name"])


def broken(isvc):
    """Copies of the CPU InferenceService, each broken in one way, with the
    path its error must name."""
    cases = []

    def case(path, change):
        doc = copy.deepcopy(isvc)
        change(doc)
        cases.append((path, doc))
    case("spec/predictor/containers/0",  # a typo: would be pruned, and the pod never ready-checked
         lambda d: d["spec"]["predictor"]["containers"][0].__setitem__(
             "readinesProbe", d["spec"]["predictor"]["containers"][0].pop("readinessProbe")))
    case("spec/predictor/containers/0/ports/0/containerPort",  # a string where an integer goes
         lambda d: d["spec"]["predictor"]["containers"][0]["ports"][0].__setitem__(
             "containerPort", "8080"))
    case("spec/predictor/containers/0",  # a required field missing
         lambda d: d["spec"]["predictor"]["containers"][0].pop("name"))
    case("spec/predictor",  # a Deployment's field, not an InferenceService's
         lambda d: d["spec"]["predictor"].__setitem__("replicas", 3))
    case("spec",  # no predictor
         lambda d: d["spec"].pop("predictor"))
    return cases


def test_schema_refuses_broken_manifests(isvc):
    cases = broken(isvc)
    errors = schema_errors([doc for _, doc in cases])
    for (path, _), errs in zip(cases, errors):
        assert errs, "the schema accepted a manifest broken at %s" % path
        assert any(e.startswith(path + ": ") for e in errs), (path, errs)


# ---- the container, with the Deployment's checks ---------------------------------------------

def test_probes_match_container_port(isvc, dockerfile):
    check_probes(kserve_container(isvc), dockerfile)


def test_security_matches_image(isvc, dockerfile):
    check_security(predictor(isvc), kserve_container(isvc), dockerfile)


def test_threads_follow_cpu_limit(isvc):
    check_threads_follow_cpu_limit(kserve_container(isvc))


def test_grace_period_exceeds_drain(k8s, isvc):
    check_grace_period(k8s, predictor(isvc), kserve_container(isvc))
    ru = predictor(isvc)["deploymentStrategy"]["rollingUpdate"]
    assert ru["maxUnavailable"] in (0, "0%")


def test_config_is_deploy_k8s_configmap(k8s, isvc):
    path, _ = config_map_file(k8s, kserve_container(isvc), predictor(isvc))
    assert path == "/etc/attnserve/attnserve.json"


def env(c):
    return {e["name"]: e.get("value") for e in c.get("env", [])}


def test_kserve_specifics(k8s, isvc):
    """What KServe itself acts on: the container's name, the storage URI it
    mounts at /mnt/models, the mode, scraping, and scaling as deploy/k8s."""
    c, pred, ann = kserve_container(isvc), predictor(isvc), isvc["metadata"]["annotations"]
    assert c["name"] == KSERVE_CONTAINER
    e = env(c)
    assert re.match(r"(pvc|s3|gs|https?|hf)://\S+", e["STORAGE_URI"]), e["STORAGE_URI"]
    # The model is served from KServe's mount, one directory in it so that
    # the name it is served under is the directory's.
    assert os.path.dirname(e["ATTNSERVE_MODEL"]) == KSERVE_MODEL_DIR, e["ATTNSERVE_MODEL"]
    assert "ATTNSERVE_MODELS" not in e
    # KServe's name for it since 0.16 (what its webhook's checks expect).
    assert ann["serving.kserve.io/deploymentMode"] == "Standard"
    ports = [p["containerPort"] for p in c["ports"]]
    assert ann["serving.kserve.io/enable-prometheus-scraping"] == "true"
    assert int(ann["prometheus.kserve.io/port"]) in ports
    assert ann["prometheus.kserve.io/path"] == "/metrics"
    hpa = one(k8s, "HorizontalPodAutoscaler")["spec"]
    assert (pred["minReplicas"], pred["maxReplicas"]) == (hpa["minReplicas"], hpa["maxReplicas"])
    assert pred["scaleMetric"] == "cpu"
    target = hpa["metrics"][0]["resource"]["target"]["averageUtilization"]
    assert pred["scaleTarget"] == target
    # KServe's admission check of an HPA-scaled predictor: a cpu target is a percentage.
    assert 1 <= pred["scaleTarget"] <= 100


def test_memory_limit_covers_worst_case(k8s, isvc):
    """The binary started with the ConfigMap's config and the container's
    environment (the model at this machine's path where KServe mounts it)."""
    c = kserve_container(isvc)
    _, text = config_map_file(k8s, c, predictor(isvc))
    info, rss = info_of(text, c, paths={KSERVE_MODEL_DIR: os.path.dirname(MODEL)})
    name = os.path.basename(env(c)["ATTNSERVE_MODEL"])
    assert name == os.path.basename(MODEL)
    assert [m["name"] for m in info["models"]] == [name], info["models"]
    check_memory_limit(c, info, rss)


# ---- the GPU overlay ------------------------------------------------------------------------

def test_gpu_overlay_asks_for_a_gpu_and_the_cuda_engine(isvc, isvc_gpu):
    check_gpu_container(kserve_container(isvc), kserve_container(isvc_gpu), predictor(isvc_gpu))
    # Nothing but the container, the tolerations and the replicas changes.
    strip = {"containers", "tolerations", "minReplicas", "maxReplicas"}
    assert ({k: v for k, v in predictor(isvc).items() if k not in strip}
            == {k: v for k, v in predictor(isvc_gpu).items() if k not in strip})
    assert isvc["metadata"] == isvc_gpu["metadata"]
    assert pod_labels(isvc) == pod_labels(isvc_gpu)


def test_gpu_overlay_matches_the_gpu_image(isvc_gpu):
    check_gpu_image(kserve_container(isvc_gpu))


def test_gpu_resources_as_deploy_k8s_gpu(isvc_gpu, gpu_deployment):  # noqa: F811
    """One figure for the GPU pod's host memory, in both deployments (it is
    not measured yet: deploy/k8s/gpu/deployment-patch.yaml says so)."""
    _, k8s_gpu = gpu_deployment
    assert kserve_container(isvc_gpu)["resources"] == deployment_container(k8s_gpu)["resources"]


# ---- the disruption budget -------------------------------------------------------------------

def test_pdb_fits_the_predictor_and_not_deploy_k8s(k8s, kserve, isvc, isvc_gpu):
    pdb = kserve["PodDisruptionBudget"]
    sel = pdb["spec"]["selector"]["matchLabels"]
    for doc in (isvc, isvc_gpu):
        labels = pod_labels(doc)
        assert sel.items() <= labels.items(), (sel, labels)
        assert int(pdb["spec"]["maxUnavailable"]) < predictor(doc)["minReplicas"]
        # deploy/k8s's selectors never pick these pods, nor this budget theirs.
        for kind in ("Service", "PodDisruptionBudget"):
            k8s_sel = one(k8s, kind)["spec"]["selector"]
            k8s_sel = k8s_sel.get("matchLabels", k8s_sel)
            assert not k8s_sel.items() <= labels.items(), (kind, k8s_sel, labels)
    k8s_pods = one(k8s, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert not sel.items() <= k8s_pods.items()


def test_pdb_schema_strict(kserve):
    pydeps = os.environ.get("ATTNSERVE_DEPLOY_PYDEPS_DIR")
    if not pydeps:
        pytest.fail("kubernetes-validate not installed (tests/deploy/run.sh installs it)")
    for version in K8S_VERSIONS:
        r = subprocess.run(["/usr/bin/python3", "-c", K8S_VALIDATE, version,
                            os.path.join(KSERVE, "pdb.yaml")],
                           capture_output=True, text=True, timeout=120,
                           env=dict(os.environ, PYTHONPATH=pydeps))
        assert r.returncode == 0, "against Kubernetes %s:\n%s%s" % (version, r.stdout, r.stderr)
