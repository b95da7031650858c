#!/usr/bin/env python3
"""Build a gem protocol message on stdout (tests use it to send good and bad commits).

gem-msg.py [--worker W] [--base V] [--count N] [--value X] [--fragment JSON]
           [--codec raw|zlib|fp16|int8|int4|topk:F] [--nan] [--inf-half] [--bad-crc]
           [--bad-zlib] [--short] [--blob-name NAME] [--bad-scale] [--bad-index] [--seal]

fp16: the values as IEEE half floats, the CRC over the floats they decode to; --inf-half puts
an infinite half in the middle (its CRC computed as if it decoded to +inf). int8, int4, topk:F
are written from gem-protocol(7) alone (the values vary around --value); --bad-scale makes the
last int8/int4 block's scale negative, --bad-index puts topk's last index at count.
--seal: the header ends with head_crc32, as in a file gem writes (gem-protocol(7)).
"""
import argparse, json, struct, sys, zlib

p = argparse.ArgumentParser()
p.add_argument("--worker", type=int, default=0)
p.add_argument("--base", type=int, default=0)
p.add_argument("--seq", type=int, default=0)
p.add_argument("--fragment", help="the header's fragment (any JSON: refusals are tested)")
p.add_argument("--count", type=int, required=True)
p.add_argument("--value", type=float, default=0.0)
p.add_argument("--codec", default="raw")
p.add_argument("--nan", action="store_true")
p.add_argument("--inf-half", action="store_true")
p.add_argument("--bad-crc", action="store_true")
p.add_argument("--bad-zlib", action="store_true")
p.add_argument("--short", action="store_true", help="blob shorter than its size says")
p.add_argument("--blob-name", default="update")
p.add_argument("--bad-scale", action="store_true")
p.add_argument("--bad-index", action="store_true")
p.add_argument("--seal", action="store_true", help="end the header with head_crc32")
a = p.parse_args()


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def blocks(vals, L):
    """int8 (L 127) or int4 (L 7): blocks of 256, a float32 scale, then the values."""
    out, back = b"", []
    for b in range(0, len(vals), 256):
        blk = [f32(x) for x in vals[b:b + 256]]
        m = max(abs(x) for x in blk)
        s, inv = (f32(m / L), f32(L / m)) if m >= 2.0 ** -96 else (0.0, 0.0)
        qs = [int(round(max(-L, min(L, f32(x * inv))))) for x in blk]
        back += [f32(q * s) for q in qs]
        if a.bad_scale and b + 256 >= len(vals):
            s = -s - 1
        out += struct.pack("<f", s)
        if L == 127:
            out += bytes(q & 0xff for q in qs)
        else:
            nib = bytearray((len(qs) + 1) // 2)
            for j, q in enumerate(qs):
                nib[j // 2] |= (q & 15) << (4 * (j % 2))
            out += bytes(nib)
    return out, back


def topk(vals, f):
    """the ceil(f·n) largest |x|, ties to the lower index: k, halves, LEB128 gaps."""
    k = max(1, -(-int(f * 1e9) * len(vals) // int(1e9)))
    pick = sorted(sorted(range(len(vals)), key=lambda i: (-abs(f32(vals[i])), i))[:k])
    halves = struct.pack("<%de" % k, *[vals[i] for i in pick])
    back = [0.0] * len(vals)
    for i, h in zip(pick, struct.unpack("<%de" % k, halves)):
        back[i] = h
    if a.bad_index:
        pick[-1] = len(vals)
    gaps, prev = bytearray(), -1
    for i in pick:
        g = i - prev - 1
        while g >= 128:
            gaps.append(g & 127 | 128)
            g >>= 7
        gaps.append(g)
        prev = i
    return struct.pack("<I", k) + halves + bytes(gaps), back

vals = [a.value] * a.count
if a.codec in ("int8", "int4") or a.codec.startswith("topk:"):
    vals = [a.value * (1 + ((i * 37) % 101) / 50.0) * (-1) ** i for i in range(a.count)]
if a.nan:
    vals[a.count // 2] = float("nan")
if a.codec == "fp16":
    halves = struct.pack("<%de" % a.count, *vals)
    vals = list(struct.unpack("<%de" % a.count, halves))
    if a.inf_half:
        i = a.count // 2
        halves = halves[:2 * i] + b"\x00\x7c" + halves[2 * i + 2:]
        vals[i] = float("inf")
codec = a.codec
if a.codec in ("int8", "int4"):
    halves, vals = blocks(vals, 127 if a.codec == "int8" else 7)
elif a.codec.startswith("topk:"):
    halves, vals = topk(vals, float(a.codec[5:]))
    codec = "topk"
raw = struct.pack("<%df" % a.count, *vals)
crc = zlib.crc32(raw)
if a.bad_crc:
    crc ^= 1
data = raw if a.codec == "raw" else zlib.compress(raw, 1) if a.codec == "zlib" else halves
if a.bad_zlib:
    data = b"\x78\x01" + bytes(range(256)) * 4
head = {"worker": a.worker, "base": a.base, "loss": 1.0, "samples": 32,
        "blobs": [{"name": a.blob_name, "codec": codec, "count": a.count,
                   "size": len(data), "crc32": crc}]}
if a.seq:
    head["seq"] = a.seq
if a.fragment is not None:
    head["fragment"] = json.loads(a.fragment)
if a.short:
    data = data[:-4]
line = json.dumps(head, separators=(",", ":")).encode()
if a.seal:
    line = line[:-1] + b","
    line += b'"head_crc32":%d}' % zlib.crc32(line)
sys.stdout.buffer.write(line + b"\n" + data)
