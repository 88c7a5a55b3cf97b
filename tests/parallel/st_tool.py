#!/usr/bin/env python3
"""safetensors helpers for the parallel tests (standard library only).

  st_tool.py diff A B TOL      every tensor of A and B has the same names and
                               shapes and differs by at most TOL (absolute);
                               prints the largest difference
  st_tool.py skew FILE L       make every token of an L-layer model choose
                               experts 0 and 1: a constant channel in the
                               embeddings and gate rows that favour it
"""
import json
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


def diff(pa, pb, tol):
    ra, ba, ha = read(pa)
    rb, bb, hb = read(pb)
    if sorted(ha) != sorted(hb):
        only = sorted(set(ha) ^ set(hb))
        sys.exit("tensor names differ: %s" % only[:5])
    worst, where = 0.0, ""
    for name in sorted(ha):
        if ha[name]["shape"] != hb[name]["shape"]:
            sys.exit("%s: shape %s vs %s" % (name, ha[name]["shape"], hb[name]["shape"]))
        for x, y in zip(floats(ra, ba, ha[name]), floats(rb, bb, hb[name])):
            d = abs(x - y)
            if d > worst or d != d:
                worst, where = d, name
    print("max |difference| %.3g in %s (%d tensors)" % (worst, where, len(ha)))
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
