"""A broken model file is a clear start-up error (exit status 2, a message
naming the file and what is wrong), never a crash or a server that starts
with half a model: cut in the data, a header that is not JSON, a header
length past any sane size or past the file, a file shorter than its length
field, an unknown dtype. (test_embeddings.py covers a missing model and a
file cut in its header; test_membudget.py a budget below one request.)"""
import json
import os
import struct
import subprocess

import pytest

from conftest import BIN, MODEL_DIR, free_port

WEIGHTS = os.path.join(MODEL_DIR, "model.safetensors")


def model_with(tmp_path, name, data):
    """A model directory like MODEL_DIR (links to its files) whose
    model.safetensors is data."""
    d = tmp_path / name
    d.mkdir()
    for f in os.listdir(MODEL_DIR):
        if f != "model.safetensors":
            os.symlink(os.path.join(MODEL_DIR, f), d / f)
    (d / "model.safetensors").write_bytes(data)
    return d


def start(tmp_path, model):
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"host": "127.0.0.1", "port": free_port(), "threads": 1}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTNSERVE_")}
    return subprocess.run([BIN, "--config", str(cfg), "--model=" + str(model)],
                          capture_output=True, text=True, timeout=60, env=env)


@pytest.fixture(scope="module")
def weights():
    with open(WEIGHTS, "rb") as f:
        data = f.read()
    (header_len,) = struct.unpack("<Q", data[:8])
    return data, header_len


def corrupt(case, data, header_len):
    if case == "cut_in_data":
        return data[:len(data) * 2 // 3]
    if case == "header_not_json":
        return data[:8] + b"x" * 12 + data[20:]
    if case == "header_length_absurd":
        return struct.pack("<Q", 1 << 40) + data[8:]
    if case == "header_length_past_the_file":
        return struct.pack("<Q", header_len + 64) + data[8:header_len + 8]
    if case == "shorter_than_the_length_field":
        return data[:5]
    if case == "unknown_dtype":
        header = data[8:8 + header_len].replace(b'"F32"', b'"F99"', 1)
        return data[:8] + header + data[8 + header_len:]
    raise AssertionError(case)


EXPECTED = {
    "cut_in_data": "data_offsets",
    "header_not_json": "not valid JSON",
    "header_length_absurd": "header length",
    "header_length_past_the_file": "truncated: header of",
    "shorter_than_the_length_field": "truncated",
    "unknown_dtype": "dtype",
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_start_refuses_a_broken_weights_file(tmp_path, weights, case):
    data, header_len = weights
    model = model_with(tmp_path, case, corrupt(case, data, header_len))
    p = start(tmp_path, model)
    out = p.stdout + p.stderr
    assert p.returncode == 2, out
    assert "cannot load the model" in out and "model.safetensors" in out, out
    assert EXPECTED[case] in out, out
    for marker in ("AddressSanitizer", "runtime error:", "LeakSanitizer"):
        assert marker not in out, out
