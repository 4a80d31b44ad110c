"""make_body.py SEQ HEADS HEAD_DIM ENCODING — prints a /v1/attention request
with random float32 tensors (nested arrays or base64), for bench/http/run.sh."""
import base64
import json
import random
import struct
import sys

seq, heads, dim = (int(x) for x in sys.argv[1:4])
encoding = sys.argv[4]
rng = random.Random(0)


def tensor():
    flat = [rng.uniform(-1, 1) for _ in range(seq * heads * dim)]
    if encoding == "base64":
        return {"shape": [seq, heads, dim],
                "data": base64.b64encode(struct.pack("<%df" % len(flat), *flat)).decode()}
    it = iter(round(x, 6) for x in flat)
    return [[[next(it) for _ in range(dim)] for _ in range(heads)] for _ in range(seq)]


print(json.dumps({"q": tensor(), "k": tensor(), "v": tensor(), "causal": False}))
