#!/usr/bin/python3
"""The GEM paper's CNN (share/gem/models/cnn.json) in PyTorch, on Fashion-MNIST, as gem's child.

    gem-init --model exec:'/usr/bin/python3 /abs/share/gem/examples/torch/cnn.py' --workers 4 run/

The same network as gem's built-in cnn: conv 1→10 k5, maxpool 2, ReLU, conv 10→20 k5,
dropout2d 0.5, maxpool 2, ReLU, flatten, dense 320→300→200→10, log-softmax; PyTorch's default
initialisation (gem's rule for conv2d and dense, gem-model(5)); its parameters named as gem
names the built-in's (0.weight, 0.bias, 3.weight, ..., 12.bias), so exports compare.  Inputs
are normalised as gem normalises its own (lib/nn/data.c dataset_group_stats, dataset_set_norm):
(pixel/255 − mean)/std, mean and std those of every value of the 60,000 training images (also
with --limit), computed as gem computes them, to the same float32 bits.

Options: --data DIR (default /usr/share/datasets/fashion-mnist), --limit N (the first N
training images only), --device (cpu, cuda:0 ...), --threads N (torch's; default
GEM_EXEC_THREADS or 1), --bench N (no child: time N steps of the same network as a plain
PyTorch loop, forward + backward + SGD step, and print the median; --batch B, default 64).
"""

import argparse
import gzip
import os
import struct
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ beside the module in a checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import gem_exec  # noqa: E402  (after the path; moves stdout away when run by gem)

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip'd or not) as a uint8 array of its shape."""
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rb") as f:
        raw = f.read()
    zero, kind, ndim = struct.unpack(">HBB", raw[:4])
    if zero != 0 or kind != 0x08 or not 1 <= ndim <= 3:
        raise ValueError("%s: not an IDX file of bytes" % path)
    dims = struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim])
    data = np.frombuffer(raw, np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise ValueError("%s: %d bytes for %s" % (path, data.size, dims))
    return data.reshape(dims)


def load(d):
    f = lambda n: os.path.join(d, n + ("" if os.path.exists(os.path.join(d, n)) else ".gz"))
    return (read_idx(f("train-images-idx3-ubyte")), read_idx(f("train-labels-idx1-ubyte")),
            read_idx(f("t10k-images-idx3-ubyte")), read_idx(f("t10k-labels-idx1-ubyte")))


def _seq_sum(chunks):
    """The sum of the values in order, one addition at a time in double, as a C loop does
    (NumPy's sum is pairwise: other last bits)."""
    total = 0.0
    for c in chunks:
        total = np.add.accumulate(np.concatenate(([total], c)))[-1]
    return float(total)


def norm_table(images):
    """gem's normalisation of a run's images (lib/nn/data.c, dataset_group_stats and
    dataset_set_norm; one group for one channel): mean m and std s of every value byte/255 of
    the training images, summed in order in double; scale a = (float)(1/(255·s)), shift
    c = (float)(−m/s); an input is (float)byte·a + c in float32.  Returned as a table byte →
    input, the same bits as gem's."""
    flat = images.reshape(-1)
    step = 1 << 20
    n = flat.size
    m = _seq_sum(flat[i:i + step] / 255.0 for i in range(0, n, step)) / n
    v = _seq_sum((flat[i:i + step] / 255.0 - m) ** 2 for i in range(0, n, step)) / n
    std = np.sqrt(v)
    a = np.float32(1 / (255.0 * std))
    c = np.float32(-m / std)
    return np.arange(256, dtype=np.float32) * a + c, m, float(std)


def make_model(seed=None):
    import torch.nn as nn
    return nn.Sequential(
        nn.Conv2d(1, 10, 5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Conv2d(10, 20, 5), nn.Dropout2d(0.5), nn.MaxPool2d(2), nn.ReLU(),
        nn.Flatten(), nn.Linear(320, 300), nn.ReLU(), nn.Linear(300, 200), nn.ReLU(),
        nn.Linear(200, 10), nn.LogSoftmax(dim=1))


def main():
    ap = argparse.ArgumentParser(description="The GEM paper's CNN on Fashion-MNIST, as gem's "
                                 "child (gem-exec(7))")
    ap.add_argument("--data", default=DATA)
    ap.add_argument("--limit", type=int, default=0, help="the first N training images only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--bench", type=int, default=0, metavar="N",
                    help="no child: time N plain PyTorch steps (forward, backward, SGD step)")
    ap.add_argument("--batch", type=int, default=64, help="--bench's batch")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F
    # before any work: a parallel region run now would leave an idle OpenMP team behind
    torch.set_num_threads(a.threads or int(os.environ.get("GEM_EXEC_THREADS", "1")))

    x, y, xt, yt = load(a.data)
    lut = norm_table(x)[0]  # of all 60,000 training images, as gem-init's data.norm
    if a.limit:
        x, y = x[:a.limit], y[:a.limit]
    x = x.reshape(len(x), 1, 28, 28)
    y = torch.from_numpy(y.astype(np.int64))
    lut_t = torch.from_numpy(lut)
    x_t = torch.from_numpy(x.copy())

    def batch(idx):
        return lut_t[x_t[idx].long()], y[idx]

    test = (lut_t[torch.from_numpy(xt.reshape(len(xt), 1, 28, 28).copy()).long()],
            torch.from_numpy(yt.astype(np.int64)))

    if a.bench:
        return bench(a, make_model, batch, len(x))
    return gem_exec.serve(make_model, classes=10, batch=batch, loss=F.nll_loss, train=len(x),
                          test=test, name="torch-cnn", device=a.device, threads=a.threads)


def bench(a, make_model, batch, n):
    """The same network trained by PyTorch alone: what the child's step is compared with."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(a.threads or int(os.environ.get("GEM_EXEC_THREADS", "1")))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1)
    m = make_model(1).to(a.device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(1)
    idxs = [torch.from_numpy(rng.integers(0, n, a.batch)) for _ in range(a.bench)]
    times = []
    for idx in idxs:
        t0 = time.perf_counter()
        xb, yb = batch(idx)
        xb, yb = xb.to(a.device), yb.to(a.device)
        opt.zero_grad()
        loss = F.nll_loss(m(xb), yb)
        loss.backward()
        opt.step()
        loss.item()
        times.append(time.perf_counter() - t0)
    t = np.array(times) * 1e6
    print("plain PyTorch: %d steps of batch %d: median %.1f us, p10 %.1f, p90 %.1f "
          "(threads %d)" % (a.bench, a.batch, np.median(t), np.percentile(t, 10),
                            np.percentile(t, 90), torch.get_num_threads()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
