#!/usr/bin/env python3
"""Write a run's θ as raw little-endian float32 bytes on stdout, so that two runs compare with cmp.

gem-theta.py RUNDIR: RUNDIR/params.gem, or for a sliced run (RUNDIR/slice-I-of-K/) every
server's slice in order, end to end. gem-theta.py FILE: the first blob of that .gem file (an
SGP node's node-I.gem).
"""
import glob, json, os, re, sys, zlib


def blob(path):
    with open(path, "rb") as f:
        data = f.read()
    nl = data.index(b"\n")
    head = json.loads(data[:nl])
    b = head["blobs"][0]
    raw = data[nl + 1:nl + 1 + b["size"]]
    if b["codec"] != "raw":
        raw = zlib.decompress(raw)
    if b["codec"] == "zlib+shuffle":
        n = b["count"]
        raw = bytes(raw[k * n + i] for i in range(n) for k in range(4))
    assert len(raw) == 4 * b["count"] and zlib.crc32(raw) == b["crc32"], path
    return raw


run = sys.argv[1]
if os.path.isfile(run):
    sys.stdout.buffer.write(blob(run))
    sys.exit(0)
slices = sorted(glob.glob(os.path.join(run, "slice-*-of-*")),
                key=lambda d: int(re.search(r"slice-(\d+)-of", d).group(1)))
paths = [os.path.join(d, "params.gem") for d in slices] or [os.path.join(run, "params.gem")]
sys.stdout.buffer.write(b"".join(blob(p) for p in paths))
