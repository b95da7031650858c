#!/usr/bin/env python3
"""Write data files in every format of gem-data(5), good and damaged, with the standard library
only (struct, zipfile, gzip): what t2009-t2012 read back.

gem-arrays.py FORMAT DIR: FORMAT is csv, npy, npz, idx or cifar. Every good file holds the same
N = 12 samples: features x[i][j] = (i * 7 + j * 3) % 251 (bytes) or (i - j) / 8 (floats), labels
y[i] = i % 5, unless its name says otherwise.
"""
import gzip, io, os, struct, sys, zipfile

N, C = 12, 5


def xb(i, j):
    return (i * 7 + j * 3) % 251


def xf(i, j):
    return (i - j) / 8


def put(path, data):
    with open(path, "wb") as f:
        f.write(data)


# --- NumPy -----------------------------------------------------------------------------------
def npy(descr, shape, payload, version=1, fortran=False):
    """A .npy file as NumPy writes it: magic, version, header dict padded to 64 bytes, data."""
    dims = f"{shape[0]}," if len(shape) == 1 else ", ".join(str(d) for d in shape)
    head = f"{{'descr': '{descr}', 'fortran_order': {fortran}, 'shape': ({dims}), }}"
    pre = 10 if version == 1 else 12
    pad = (64 - (pre + len(head) + 1) % 64) % 64
    head = (head + " " * pad + "\n").encode("latin1" if version < 3 else "utf8")
    size = struct.pack("<H", len(head)) if version == 1 else struct.pack("<I", len(head))
    return b"\x93NUMPY" + bytes([version, 0]) + size + head + payload


def features_u1(shape):
    dim = 1
    for d in shape[1:]:
        dim *= d
    return bytes(xb(i, j) for i in range(shape[0]) for j in range(dim))


def features(fmt, shape):
    dim = 1
    for d in shape[1:]:
        dim *= d
    return b"".join(struct.pack(fmt, xf(i, j)) for i in range(shape[0]) for j in range(dim))


def labels(fmt, n=N, f=lambda i: i % C):
    return b"".join(struct.pack(fmt, f(i)) for i in range(n))


def write_npy(d):
    img = (N, 3, 4, 4)
    put(f"{d}/x_f4.npy", npy("<f4", img, features("<f", img)))
    put(f"{d}/x_u1.npy", npy("|u1", img, features_u1(img)))
    put(f"{d}/x_v2.npy", npy("<f4", (N, 6), features("<f", (N, 6)), version=2))
    put(f"{d}/x_v3.npy", npy("<f4", (N, 6), features("<f", (N, 6)), version=3))
    put(f"{d}/x_f8.npy", npy("<f8", (N, 6), features("<d", (N, 6))))
    put(f"{d}/x_be.npy", npy(">f4", (N, 6), features(">f", (N, 6))))
    put(f"{d}/x_hw.npy", npy("|u1", (N, 4, 4), features_u1((N, 4, 4))))
    put(f"{d}/x_bool.npy", npy("|b1", (N, 2), bytes((i + j) % 2 for i in range(N) for j in range(2))))
    put(f"{d}/y_i8.npy", npy("<i8", (N,), labels("<q")))
    put(f"{d}/y_u1.npy", npy("|u1", (N,), labels("<B")))
    put(f"{d}/y_u2.npy", npy("<u2", (N,), labels("<H", f=lambda i: i * 5000 % 65536)))
    put(f"{d}/y_col.npy", npy("<i4", (N, 1), labels("<i")))
    put(f"{d}/x_f4.npy.gz", gzip.compress(npy("<f4", img, features("<f", img))))
    # refused
    put(f"{d}/y_neg.npy", npy("<i8", (N,), labels("<q", f=lambda i: -1 if i == 3 else i % C)))
    put(f"{d}/y_big.npy", npy("<i4", (N,), labels("<i", f=lambda i: 70000 if i == 5 else 0)))
    put(f"{d}/y_f4.npy", npy("<f4", (N,), labels("<f")))
    put(f"{d}/y_short.npy", npy("<i8", (N - 1,), labels("<q", n=N - 1)))
    put(f"{d}/x_fortran.npy", npy("<f4", (N, 6), features("<f", (N, 6)), fortran=True))
    put(f"{d}/x_obj.npy", npy("|O", (N,), b"\x80\x04N."))
    put(f"{d}/x_str.npy", npy("<U3", (N,), b"\0" * 12 * N))
    put(f"{d}/x_nan.npy", npy("<f4", (N, 1), b"".join(struct.pack("<f", float("nan") if i == 7 else 0) for i in range(N))))
    full = npy("<f4", (N, 6), features("<f", (N, 6)))
    put(f"{d}/x_trunc.npy", full[:-5])
    put(f"{d}/x_extra.npy", full + b"\0\0\0\0")
    put(f"{d}/x_lie.npy", npy("<f4", (4294967296, 4294967296, 16), features("<f", (N, 6))))
    put(f"{d}/x_magic.npy", b"\x93NUMPZ" + full[6:])
    put(f"{d}/x_version.npy", full[:6] + b"\x04\x00" + full[8:])
    put(f"{d}/x_hlen.npy", full[:8] + struct.pack("<H", 60000) + full[10:])
    put(f"{d}/x_dict.npy", npy("<f4", (N, 6), features("<f", (N, 6))).replace(b"'shape'", b"'shapf'"))


# --- npz ---------------------------------------------------------------------------------------
def npz(path, arrays, compress=zipfile.ZIP_STORED):
    """An .npz as np.savez writes it: each member opened with force_zip64 (NumPy does so)."""
    with zipfile.ZipFile(path, "w", compression=compress) as z:
        for name, data in arrays.items():
            with z.open(name + ".npy", "w", force_zip64=True) as f:
                f.write(data)


def to_zip64_end(data):
    """The same zip with zip64 end records (as a zip past 4 GiB or 65,535 members has)."""
    end = data.rindex(b"PK\x05\x06")
    n, cd_size, cd_off = struct.unpack("<HII", data[end + 10:end + 20])
    rec = struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, cd_size, cd_off)
    loc = struct.pack("<IIQI", 0x07064B50, 0, end, 1)
    eocd = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    return data[:end] + rec + loc + eocd


def write_npz(d):
    img = (N, 3, 4, 4)
    x, y = npy("<f4", img, features("<f", img)), npy("<i8", (N,), labels("<q"))
    npz(f"{d}/xy.npz", {"x": x, "y": y})
    npz(f"{d}/deflated.npz", {"features": npy("|u1", img, features_u1(img)), "labels": y},
        zipfile.ZIP_DEFLATED)
    n2 = N // 2
    npz(f"{d}/keras.npz", {"x_train": x, "y_train": y,
                           "x_test": npy("<f4", (n2, 6), features("<f", (n2, 6))),
                           "y_test": npy("<u1", (n2,), labels("<B", n=n2))}, zipfile.ZIP_DEFLATED)
    npz(f"{d}/arr.npz", {"arr_0": x, "arr_1": y})
    npz(f"{d}/other.npz", {"a": x, "b": y})
    with open(f"{d}/xy.npz", "rb") as f:
        good = f.read()
    put(f"{d}/zip64.npz", to_zip64_end(good))
    # damaged: a flipped data byte (CRC), a cut end record, a local header moved, a lying size
    at = good.index(b"\x93NUMPY") + 200
    put(f"{d}/crc.npz", good[:at] + bytes([good[at] ^ 1]) + good[at + 1:])
    put(f"{d}/truncated.npz", good[:-30])
    cd = good.rindex(b"PK\x01\x02")
    put(f"{d}/offset.npz", good[:cd + 42] + struct.pack("<I", 7) + good[cd + 46:])
    with open(f"{d}/deflated.npz", "rb") as f:
        dfl = f.read()
    cd = dfl.index(b"PK\x01\x02")
    put(f"{d}/bomb.npz", dfl[:cd + 24] + struct.pack("<I", 0x7FFFFFFF) + dfl[cd + 28:])
    put(f"{d}/not.npz", x)


# --- IDX ---------------------------------------------------------------------------------------
def idx(code, dims, payload):
    return struct.pack(">BBBB", 0, 0, code, len(dims)) + b"".join(struct.pack(">I", d) for d in dims) + payload


def write_idx(d):
    img = (N, 3, 4, 4)
    for sub in ("colour", "float", "dotted", "gz", "lie", "mismatch", "notest"):
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    lab = idx(0x08, (N,), labels(">B"))
    put(f"{d}/colour/train-images-idx4-ubyte", idx(0x08, img, features_u1(img)))
    put(f"{d}/colour/train-labels-idx1-ubyte", lab)
    put(f"{d}/colour/t10k-images-idx4-ubyte", idx(0x08, img, features_u1(img)))
    put(f"{d}/colour/t10k-labels-idx1-ubyte", lab)
    put(f"{d}/float/train-images-idx3-ubyte", idx(0x0D, (N, 4, 4), features(">f", (N, 4, 4))))
    put(f"{d}/float/train-labels-idx1-ubyte", idx(0x0C, (N,), labels(">i", f=lambda i: i * 5000 % 65536)))
    put(f"{d}/dotted/train-images.idx3-ubyte", idx(0x08, (N, 4, 4), features_u1((N, 4, 4))))
    put(f"{d}/dotted/train-labels.idx1-ubyte", lab)
    put(f"{d}/dotted/test-images.idx3-ubyte", idx(0x08, (N, 4, 4), features_u1((N, 4, 4))))
    put(f"{d}/dotted/test-labels.idx1-ubyte", lab)
    put(f"{d}/gz/train-images.idx3-ubyte.gz", gzip.compress(idx(0x08, (N, 4, 4), features_u1((N, 4, 4)))))
    put(f"{d}/gz/train-labels-idx1-ubyte.gz", gzip.compress(lab))
    put(f"{d}/lie/train-images-idx3-ubyte", idx(0x08, (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF), b"\0" * 64))
    put(f"{d}/lie/train-labels-idx1-ubyte", lab)
    put(f"{d}/mismatch/train-images-idx3-ubyte", idx(0x08, (N + 1, 4, 4), features_u1((N + 1, 4, 4))))
    put(f"{d}/mismatch/train-labels-idx1-ubyte", lab)
    put(f"{d}/notest/train-images-idx3-ubyte", idx(0x08, (N, 4, 4), features_u1((N, 4, 4))))
    put(f"{d}/notest/train-labels-idx1-ubyte", lab)


# --- CIFAR -------------------------------------------------------------------------------------
def cifar_records(n, first, label_bytes=1):
    out = bytearray()
    for i in range(first, first + n):
        out += bytes([i % 20, i % C] if label_bytes == 2 else [i % C])
        out += bytes((i * 7 + j * 3) % 251 for j in range(3072))
    return bytes(out)


def write_cifar(d):
    for sub in ("c10", "c10/cifar-10-batches-bin", "c100", "cut", "gap", "empty"):
        os.makedirs(f"{d}/{sub}", exist_ok=True)
    # CIFAR-10 in the archive's subdirectory: batches of 4 samples, the test batch of 3
    b = f"{d}/c10/cifar-10-batches-bin"
    for k in range(3):
        put(f"{b}/data_batch_{k + 1}.bin", cifar_records(4, 4 * k))
    put(f"{b}/test_batch.bin", cifar_records(3, 100))
    put(f"{d}/c100/train.bin", cifar_records(N, 0, 2))
    put(f"{d}/cut/data_batch_1.bin", cifar_records(2, 0)[:-100])
    put(f"{d}/gap/data_batch_1.bin", cifar_records(2, 0))
    put(f"{d}/gap/data_batch_3.bin", cifar_records(2, 0))
    put(f"{d}/empty/data_batch_1.bin", b"")


# --- CSV ---------------------------------------------------------------------------------------
def write_csv(d):
    rows = "".join(f"{xf(i, 0)},{i % C},{xf(i, 1)},{xf(i, 2)}\n" for i in range(N))
    put(f"{d}/good.csv", ("a,label,b,c\n" + rows).encode())
    put(f"{d}/bom-crlf.csv", ("\ufeff\"a\",\"label\",\"b\",c\r\n" + rows.replace("\n", "\r\n") + "\r\n").encode())
    put(f"{d}/quoted.csv", ('"sepal, length",label,"b ""x""",c\n\n' +
                            "".join(f'"{xf(i, 0)}", {i % C} ,{xf(i, 1)},"{xf(i, 2)}"\n' for i in range(N))).encode())
    put(f"{d}/bools.csv", ("a,label\n" + "".join(f"{'True' if i % 2 else 'False'},{i % C}.0\n" for i in range(N))).encode())
    put(f"{d}/good.csv.gz", gzip.compress(("a,label,b,c\n" + rows).encode()))
    bad = {
        "empty-cell": "a,label\n1,0\n,1\n",
        "nan": "a,label\n1,0\nnan,1\n",
        "text": "a,label\n1,0\nabc,1\n",
        "label-float": "a,label\n1,0\n2,1.5\n",
        "label-neg": "a,label\n1,0\n2,-1\n",
        "label-big": "a,label\n1,0\n2,65536\n",
        "label-name": "a,label\n1,setosa\n",
        "short-row": "a,label,b\n1,0,2\n1,0\n",
        "long-row": "a,label,b\n1,0,2,3\n",
        "no-label": "a,b,c\n1,2,3\n",
        "semicolon": "a;label;b\n1;0;2\n",
        "index": ",a,label\n0,1,0\n",
        "quote-open": 'a,label\n"1,0\n2,1\n',
        "quote-junk": 'a,label\n"1"x,0\n',
        "two-labels": "label,a,label\n1,2,3\n",
        "only-label": "label\n1\n",
        "no-rows": "a,label\n\n",
        "cr-only": "a,label\r1,0\r2,1\r",
        "nul": "a,label\n1\0,0\n",
    }
    for name, text in bad.items():
        put(f"{d}/{name}.csv", text.encode())
    put(f"{d}/empty.csv", b"")


def main():
    what, d = sys.argv[1], sys.argv[2]
    os.makedirs(d, exist_ok=True)
    {"csv": write_csv, "npy": write_npy, "npz": write_npz, "idx": write_idx, "cifar": write_cifar}[what](d)


if __name__ == "__main__":
    main()
