#!/usr/bin/env python3
"""trim_crd.py CRD_YAML SOURCE_COMMIT OUT.json.gz

Writes the openAPIV3Schema of KServe's InferenceService CRD
(config/crd/full/serving.kserve.io_inferenceservices.yaml in kserve/kserve,
Apache-2.0), version v1beta1, trimmed to what deploy/kserve uses:
apiVersion, kind, metadata and spec.predictor, which is kept whole. Dropped:
spec.transformer, spec.explainer, spec.canary and status. Everything kept is
KServe's text unchanged; the test makes it strict (tests/deploy/
test_kserve_manifests.py), so an InferenceService that uses a dropped
branch is refused by this copy: refresh it with the branch kept then."""
import gzip
import json
import sys

import yaml

KEEP_SPEC = ("predictor",)


def main(path, commit, out):
    with open(path) as f:
        crd = yaml.safe_load(f)
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == "InferenceService"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1beta1")
    schema = version["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    dropped = sorted(k for k in spec["properties"] if k not in KEEP_SPEC)
    spec["properties"] = {k: spec["properties"][k] for k in KEEP_SPEC}
    schema["properties"].pop("status", None)
    schema["$comment"] = (
        "KServe's InferenceService CRD (serving.kserve.io, v1beta1), openAPIV3Schema from "
        "config/crd/full/serving.kserve.io_inferenceservices.yaml of kserve/kserve at commit %s, "
        "Apache License 2.0 (Copyright The KServe Authors). Trimmed by "
        "tests/deploy/kserve/trim_crd.py: status and spec.%s removed; the rest unchanged."
        % (commit, ", spec.".join(dropped)))
    # Compact and gzipped (600 KB of indented JSON is 8 KB so), like the
    # big goldens; mtime 0 so that a refresh from the same commit is the
    # same bytes.
    with gzip.GzipFile(out, "wb", mtime=0) as f:
        f.write(json.dumps(schema, sort_keys=True, separators=(",", ":")).encode())


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
