#!/usr/bin/env python3
"""Build a gem protocol message on stdout (tests use it to send good and bad commits).

gem-msg.py [--worker W] [--base V] [--count N] [--value X] [--codec raw|zlib|fp16]
           [--nan] [--inf-half] [--bad-crc] [--bad-zlib] [--short] [--blob-name NAME]

fp16: the values as IEEE half floats, the CRC over the floats they decode to; --inf-half puts
an infinite half in the middle (its CRC computed as if it decoded to +inf).
"""
import argparse, json, struct, sys, zlib

p = argparse.ArgumentParser()
p.add_argument("--worker", type=int, default=0)
p.add_argument("--base", type=int, default=0)
p.add_argument("--seq", type=int, default=0)
p.add_argument("--count", type=int, required=True)
p.add_argument("--value", type=float, default=0.0)
p.add_argument("--codec", default="raw")
p.add_argument("--nan", action="store_true")
p.add_argument("--inf-half", action="store_true")
p.add_argument("--bad-crc", action="store_true")
p.add_argument("--bad-zlib", action="store_true")
p.add_argument("--short", action="store_true", help="blob shorter than its size says")
p.add_argument("--blob-name", default="update")
a = p.parse_args()

vals = [a.value] * a.count
if a.nan:
    vals[a.count // 2] = float("nan")
if a.codec == "fp16":
    halves = struct.pack("<%de" % a.count, *vals)
    vals = list(struct.unpack("<%de" % a.count, halves))
    if a.inf_half:
        i = a.count // 2
        halves = halves[:2 * i] + b"\x00\x7c" + halves[2 * i + 2:]
        vals[i] = float("inf")
raw = struct.pack("<%df" % a.count, *vals)
crc = zlib.crc32(raw)
if a.bad_crc:
    crc ^= 1
data = raw if a.codec == "raw" else halves if a.codec == "fp16" else zlib.compress(raw, 1)
if a.bad_zlib:
    data = b"\x78\x01" + bytes(range(256)) * 4
head = {"worker": a.worker, "base": a.base, "loss": 1.0, "samples": 32,
        "blobs": [{"name": a.blob_name, "codec": a.codec, "count": a.count,
                   "size": len(data), "crc32": crc}]}
if a.seq:
    head["seq"] = a.seq
if a.short:
    data = data[:-4]
sys.stdout.buffer.write(json.dumps(head, separators=(",", ":")).encode() + b"\n" + data)
