#!/usr/bin/env python3
"""safetensors helpers for the parallel tests (standard library only).

  st_tool.py diff A B TOL      every tensor of A and B has the same names and
                               shapes and differs by at most TOL (absolute);
                               prints the largest difference. A and B are
                               safetensors files or moekit checkpoint
                               directories (their rank files' pieces put
                               together through checkpoint.index.json)
  st_tool.py skew FILE L       make every token of an L-layer model choose
                               experts 0 and 1: a constant channel in the
                               embeddings and gate rows that favour it
"""
import json
import os
import struct
import sys


def read(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    header.pop("__metadata__", None)
    return raw, 8 + n, header


def floats(raw, base, info):
    assert info["dtype"] == "F32", info["dtype"]
    a, b = info["data_offsets"]
    return struct.unpack("<%df" % ((b - a) // 4), raw[base + a : base + b])


def tensors(path):
    """{name: (shape, floats)} of a safetensors file or a checkpoint directory."""
    index = os.path.join(path, "checkpoint.index.json")
    if not os.path.isdir(path):
        raw, base, h = read(path)
        return {k: (v["shape"], floats(raw, base, v)) for k, v in h.items()}
    out = {}
    for f in json.load(open(index))["files"]:
        raw = open(os.path.join(path, f["file"]), "rb").read()
        for p in f["pieces"]:
            assert p["dtype"] == "F32", p["dtype"]
            numel = 1
            for d in p["shape"]:
                numel *= d
            shape, vals = out.setdefault(p["name"], (p["shape"], [None] * numel))
            a = p["offset"]
            vals[p["start"] : p["start"] + p["count"]] = struct.unpack(
                "<%df" % p["count"], raw[a : a + 4 * p["count"]])
    for name, (shape, vals) in out.items():
        if None in vals:
            sys.exit("%s: %s is not wholly stored" % (path, name))
    return out


def diff(pa, pb, tol):
    ta, tb = tensors(pa), tensors(pb)
    if sorted(ta) != sorted(tb):
        only = sorted(set(ta) ^ set(tb))
        sys.exit("tensor names differ: %s" % only[:5])
    worst, where = 0.0, ""
    for name in sorted(ta):
        if ta[name][0] != tb[name][0]:
            sys.exit("%s: shape %s vs %s" % (name, ta[name][0], tb[name][0]))
        for x, y in zip(ta[name][1], tb[name][1]):
            d = abs(x - y)
            if d > worst or d != d:
                worst, where = d, name
    print("max |difference| %.3g in %s (%d tensors)" % (worst, where, len(ta)))
    if not worst <= tol:
        sys.exit("weights differ by more than %g" % tol)


def skew(path, layers):
    raw, base, h = read(path)
    buf = bytearray(raw)

    def put(name, fn):
        info = h[name]
        rows, cols = info["shape"]
        a = info["data_offsets"][0]
        for r in range(rows):
            for c in range(cols):
                v = fn(r, c)
                if v is not None:
                    struct.pack_into("<f", buf, base + a + 4 * (r * cols + c), v)

    put("model.embed_tokens.weight", lambda r, c: 4.0 if c == 0 else None)
    for l in range(layers):
        put("model.layers.%d.block_sparse_moe.gate.weight" % l,
            lambda r, c: (3.0 if r < 2 else -3.0) if c == 0 else None)
    with open(path, "wb") as f:
        f.write(buf)


if __name__ == "__main__":
    if sys.argv[1] == "diff":
        diff(sys.argv[2], sys.argv[3], float(sys.argv[4]))
    elif sys.argv[1] == "skew":
        skew(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
