#!/usr/bin/env python3
"""Write learnable data sets in the formats of gem-data(5), with the standard library only, and
a model spec that fits each: what t5800 trains on (doc/results/data-formats.md).

gem-made-data.py FORMAT DIR: FORMAT is
  csv    DIR/t.csv: 8 features (on scales from 0.01 to 1000), a column "label" of 4 classes
  npy    DIR/x.npy (float32 (N, 8)), DIR/y.npy (int64): the same table
  npz    DIR/d.npz: x_train, y_train, x_test, y_test: uint8 images (N, 3, 8, 8), 4 classes
  cifar  DIR/data_batch_1.bin, DIR/data_batch_2.bin, DIR/test_batch.bin: 10 classes
  many   DIR/x.npy, DIR/y.npy: float32 (N, 16), 300 classes
and DIR/model.json. A class is a place in the input, plus noise, so a small net learns it.
"""
import importlib.util, os, random, struct, sys

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("arrays", os.path.join(here, "gem-arrays.py"))
arrays = importlib.util.module_from_spec(spec)
spec.loader.exec_module(arrays)

SCALES = [0.01, 1, 5, 20, 100, 1000, 0.5, 3]
OFFSETS = [0, 50, -3, 7, 1000, -200, 0, 1]


def table(n, r):
    """Rows of 8 features and a label in [0, 4): feature c of class c stands out."""
    rows = []
    for _ in range(n):
        c = r.randrange(4)
        v = [r.gauss(0, 1) + (2.5 if j == c or j == c + 4 else 0) for j in range(8)]
        rows.append(([v[j] * SCALES[j] + OFFSETS[j] for j in range(8)], c))
    return rows


def image(c, r, chans, side):
    """Class c: a bright quadrant (c % 4) in channel c % chans, noise elsewhere."""
    px = bytearray()
    for ch in range(chans):
        for y in range(side):
            for x in range(side):
                q = (y * 2 // side) * 2 + (x * 2 // side)
                hot = q == c % 4 and ch == c % chans and (c < 4 or (x + y) % 2 == c // 4 % 2)
                px.append(r.randrange(100, 256) if hot else r.randrange(0, 170))
    return bytes(px)


def model(path, inputs, classes, hidden):
    layers = [{"type": "flatten"}] if len(inputs) > 1 else []
    layers += [{"type": "dense", "out": hidden}, {"type": "relu"},
              {"type": "dense", "out": classes}, {"type": "logsoftmax"}]
    with open(path, "w") as f:
        f.write('{"name": "made", "input": %s, "classes": %d, "layers": %s}\n'
                % (inputs, classes, str(layers).replace("'", '"')))


def main(fmt, d):
    r = random.Random(11)
    os.makedirs(d, exist_ok=True)
    if fmt == "csv":
        with open(f"{d}/t.csv", "w") as f:
            f.write("f0,f1,f2,label,f3,f4,f5,f6,f7\n")
            for v, c in table(1600, r):
                cells = ["%.6g" % x for x in v]
                f.write(",".join(cells[:3] + [str(c)] + cells[3:]) + "\n")
        model(f"{d}/model.json", [8], 4, 16)
    elif fmt in ("npy", "many"):
        if fmt == "npy":
            rows, dim, k = table(1600, r), 8, 4
        else:
            dim, k = 16, 300
            centre = [[r.gauss(0, 1) for _ in range(dim)] for _ in range(k)]
            rows = []
            for i in range(k * 12):
                c = i % k
                rows.append(([x + r.gauss(0, 0.15) for x in centre[c]], c))
        x = b"".join(struct.pack("<%df" % dim, *v) for v, _ in rows)
        y = b"".join(struct.pack("<q", c) for _, c in rows)
        arrays.put(f"{d}/x.npy", arrays.npy("<f4", (len(rows), dim), x))
        arrays.put(f"{d}/y.npy", arrays.npy("<i8", (len(rows),), y))
        model(f"{d}/model.json", [dim], k, 16 if k < 256 else 64)
    elif fmt == "npz":
        def split(n):
            cs = [r.randrange(4) for _ in range(n)]
            x = b"".join(image(c, r, 3, 8) for c in cs)
            return arrays.npy("|u1", (n, 3, 8, 8), x), arrays.npy("|u1", (n,), bytes(cs))
        xtr, ytr = split(1200)
        xte, yte = split(300)
        arrays.npz(f"{d}/d.npz", {"x_train": xtr, "y_train": ytr, "x_test": xte, "y_test": yte})
        model(f"{d}/model.json", [3, 8, 8], 4, 16)
    elif fmt == "cifar":
        def batch(n):
            out = bytearray()
            for _ in range(n):
                c = r.randrange(10)
                out += bytes([c]) + image(c, r, 3, 32)
            return bytes(out)
        arrays.put(f"{d}/data_batch_1.bin", batch(500))
        arrays.put(f"{d}/data_batch_2.bin", batch(500))
        arrays.put(f"{d}/test_batch.bin", batch(300))
        model(f"{d}/model.json", [3, 32, 32], 10, 16)
    else:
        sys.exit(f"gem-made-data.py: unknown format {fmt}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
