#!/usr/bin/env python3
"""model_to_fp16.py SRC DST — a copy of the model directory SRC in DST with
every F32 tensor of model.safetensors stored as F16, for carrying the model
where its size matters (the GPU bundle: MiniLM's 87 MB become 45 MB). Every
other file (config, tokenizer, modules.json, 1_Pooling/, ...) is copied as
it is; hidden files (get-model.sh's stamp, which names the fp32 file's hash)
are left out. Tensors of other types (the I64 position ids) are kept.

Python's standard library only (struct's 'e' format is IEEE half precision,
rounded to nearest even), so it runs wherever python3 does, without numpy
or the safetensors package. A value beyond F16's range (65504) stops the
conversion with the tensor's name rather than becoming infinity."""
import json
import os
import shutil
import struct
import sys

WEIGHTS = "model.safetensors"
CHUNK = 1 << 20  # elements converted at a time, to bound the memory used


def read_header(f):
    (n,) = struct.unpack("<Q", f.read(8))
    return json.loads(f.read(n)), 8 + n


def convert(src, dst):
    with open(src, "rb") as f:
        header, data_start = read_header(f)
        meta = header.pop("__metadata__", None)
        # Tensors in file order, so the copy keeps the layout.
        names = sorted(header, key=lambda k: header[k]["data_offsets"][0])
        out_header, offset = {}, 0
        for name in names:
            t = header[name]
            begin, end = t["data_offsets"]
            size = (end - begin) // 2 if t["dtype"] == "F32" else end - begin
            out_header[name] = {"dtype": "F16" if t["dtype"] == "F32" else t["dtype"],
                                "shape": t["shape"], "data_offsets": [offset, offset + size]}
            offset += size
        if meta is not None:
            out_header["__metadata__"] = meta
        text = json.dumps(out_header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
        with open(dst, "wb") as o:
            o.write(struct.pack("<Q", len(text)))
            o.write(text)
            for name in names:
                t = header[name]
                begin, end = t["data_offsets"]
                f.seek(data_start + begin)
                if t["dtype"] != "F32":
                    o.write(f.read(end - begin))
                    continue
                left = (end - begin) // 4
                while left:
                    k = min(left, CHUNK)
                    values = struct.unpack("<%df" % k, f.read(4 * k))
                    try:
                        o.write(struct.pack("<%de" % k, *values))
                    except (OverflowError, struct.error) as e:
                        sys.exit("model_to_fp16: %s: a value outside F16's range (%s)" % (name, e))
                    left -= k
    return len(names)


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: model_to_fp16.py SRC_MODEL_DIR DST_DIR")
    src, dst = sys.argv[1:]
    if not os.path.isfile(os.path.join(src, WEIGHTS)):
        sys.exit("model_to_fp16: %s has no %s" % (src, WEIGHTS))
    tmp = dst.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(src, tmp, ignore=lambda d, files: [
        f for f in files if f.startswith(".") or (d == src and f == WEIGHTS)])
    n = convert(os.path.join(src, WEIGHTS), os.path.join(tmp, WEIGHTS))
    shutil.rmtree(dst, ignore_errors=True)
    os.rename(tmp, dst)
    print("model_to_fp16: %s -> %s: %d tensors, %.1f MB -> %.1f MB" % (
        src, dst, n, os.path.getsize(os.path.join(src, WEIGHTS)) / 1e6,
        os.path.getsize(os.path.join(dst, WEIGHTS)) / 1e6))


if __name__ == "__main__":
    main()
