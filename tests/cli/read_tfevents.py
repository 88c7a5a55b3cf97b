#!/usr/bin/env python3
"""An independent reader of TensorBoard event files, for moekit's tests.

Parses the TFRecord framing (uint64 length, masked CRC-32C of the length,
data, masked CRC-32C of the data), checks both CRCs with its own CRC-32C, and
decodes the protobuf fields of tensorflow.Event (wall_time=1, step=2,
file_version=3, summary=5) and Summary.Value (tag=1, simple_value=2) by hand.
Prints one JSON object per event. Exits 1 on any framing or CRC error."""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf):
    """(field number, wire type, value) of one message"""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("wire type %d" % wt)
        yield num, wt, v


def event(data):
    ev = {}
    for num, wt, v in fields(data):
        if num == 1 and wt == 1:
            ev["wall_time"] = struct.unpack("<d", v)[0]
        elif num == 2 and wt == 0:
            ev["step"] = v
        elif num == 3 and wt == 2:
            ev["file_version"] = v.decode()
        elif num == 5 and wt == 2:
            values = {}
            for snum, swt, sv in fields(v):
                if snum != 1 or swt != 2:
                    continue
                tag = val = None
                for vnum, vwt, vv in fields(sv):
                    if vnum == 1 and vwt == 2:
                        tag = vv.decode()
                    elif vnum == 2 and vwt == 5:
                        val = struct.unpack("<f", vv)[0]
                values[tag] = val
            ev["scalars"] = values
    return ev


def main(path):
    buf = open(path, "rb").read()
    i = 0
    while i < len(buf):
        if i + 12 > len(buf):
            sys.exit("%s: truncated header at byte %d" % (path, i))
        head = buf[i:i + 8]
        (n,) = struct.unpack("<Q", head)
        (crc_len,) = struct.unpack("<I", buf[i + 8:i + 12])
        if crc_len != masked(head):
            sys.exit("%s: length CRC mismatch at byte %d" % (path, i))
        data = buf[i + 12:i + 12 + n]
        (crc_data,) = struct.unpack("<I", buf[i + 12 + n:i + 16 + n])
        if len(data) != n or crc_data != masked(data):
            sys.exit("%s: data CRC mismatch at byte %d" % (path, i))
        print(json.dumps(event(data)))
        i += 16 + n


if __name__ == "__main__":
    main(sys.argv[1])
