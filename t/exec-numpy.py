#!/usr/bin/python3
"""A tiny deterministic external model for gem's tests (gem-exec(7)), written against the page
alone (it does not use share/gem/python/gem_exec.py, so the C side's tests do not depend on it).

A 1-hidden-layer MLP (4 features, 16 tanh units, 3 classes; tensors 0.weight [16, 4], 0.bias
[16], 2.weight [3, 16], 2.bias [3]) on 300 training and 90 test samples of three Gaussian blobs
that it generates from a fixed seed.  With --text: a bigram language model (one tensor
0.weight [8, 8] of logits) on a 4000-token text of 8 symbols, windows of 16 (positions), with
predict.

Bad children, for the error paths (each names when: OP[:K] is the K-th request of op OP,
1-based, default grad:1):
  --crash-at=OP[:K]    exit with status 3 in the middle of that request
  --hang-at=OP[:K]     sleep forever in that request
  --garbage[=OP[:K]]   answer that request with a line that is not JSON
  --print-stdout[=OP[:K]]  print a line of junk on standard output before the reply
  --nan[=nan|overflow] every grad's loss is NaN (written NaN, as Python's json does), or
                       1e39 (finite as a double, infinite as a float32)
  --nan-grad           every grad writes a NaN into the gradient
  --nondeterministic   every grad adds a random perturbation to the gradient and the loss
  --wrong-size         when GEM_TEST_OTHER=1 in the environment: 17 hidden units, not 16
  --stderr-chatter     a line on standard error for every request
  --no-exit            ignore end of file (sleep): to test that gem kills it after 2 s
"""

import argparse
import json
import mmap
import os
import sys
import time

import numpy as np

FEATURES, CLASSES, TRAIN, TEST = 4, 3, 300, 90
VOCAB, TEXT, WINDOW = 8, 4000, 16
MAX_LINE = 65536


def when(spec):
    op, _, k = spec.partition(":")
    return op, int(k or 1)


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", action="store_true")
    ap.add_argument("--crash-at", type=when)
    ap.add_argument("--hang-at", type=when)
    ap.add_argument("--garbage", type=when, nargs="?", const=("grad", 1))
    ap.add_argument("--print-stdout", type=when, nargs="?", const=("grad", 1))
    ap.add_argument("--nan", nargs="?", const="nan", choices=["nan", "overflow"])
    ap.add_argument("--nan-grad", action="store_true")
    ap.add_argument("--nondeterministic", action="store_true")
    ap.add_argument("--wrong-size", action="store_true")
    ap.add_argument("--stderr-chatter", action="store_true")
    ap.add_argument("--no-exit", action="store_true")
    return ap.parse_args()


def blobs():
    rng = np.random.default_rng(20261129)
    centres = rng.normal(0, 2, size=(CLASSES, FEATURES))
    y = rng.integers(0, CLASSES, size=TRAIN + TEST)
    x = centres[y] + rng.normal(0, 1, size=(TRAIN + TEST, FEATURES))
    return x[:TRAIN], y[:TRAIN], x[TRAIN:], y[TRAIN:]


def markov_text():
    rng = np.random.default_rng(20261130)
    p = rng.dirichlet(np.full(VOCAB, 0.3), size=VOCAB)
    t = np.zeros(TEXT + TEXT // 4, dtype=np.int64)
    u = rng.random(len(t))
    for i in range(1, len(t)):
        t[i] = min(int(np.searchsorted(np.cumsum(p[t[i - 1]]), u[i])), VOCAB - 1)
    return t[:TEXT], t[TEXT:]


def logsoftmax(z):
    z = z - z.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


class MLP:
    def __init__(self, hidden):
        self.h = hidden
        self.tensors = [["0.weight", [hidden, FEATURES]], ["0.bias", [hidden]],
                        ["2.weight", [CLASSES, hidden]], ["2.bias", [CLASSES]]]
        self.x, self.y, self.xt, self.yt = blobs()
        self.hello = {"name": "exec-numpy", "classes": CLASSES, "train": TRAIN, "test": TEST}

    def split(self, flat):
        h = self.h
        w1 = flat[:h * FEATURES].reshape(h, FEATURES)
        b1 = flat[h * FEATURES:h * FEATURES + h]
        at = h * FEATURES + h
        w2 = flat[at:at + CLASSES * h].reshape(CLASSES, h)
        b2 = flat[at + CLASSES * h:at + CLASSES * h + CLASSES]
        return w1, b1, w2, b2

    def init(self, seed, theta):
        rng = np.random.default_rng(seed)
        for v, fan in zip(self.split(theta), (FEATURES, FEATURES, self.h, self.h)):
            v[...] = rng.uniform(-1, 1, size=v.shape) / np.sqrt(fan)

    def forward(self, theta, x):
        w1, b1, w2, b2 = (v.astype(np.float64) for v in self.split(theta))
        a = np.tanh(x @ w1.T + b1)
        return a, logsoftmax(a @ w2.T + b2)

    def grad(self, theta, grad, idx):
        x, y = self.x[idx], self.y[idx]
        n = len(idx)
        a, lp = self.forward(theta, x)
        loss = -lp[np.arange(n), y].mean()
        d = np.exp(lp)
        d[np.arange(n), y] -= 1
        d /= n
        w2 = self.split(theta)[2].astype(np.float64)
        da = (d @ w2) * (1 - a * a)
        g1, gb1, g2, gb2 = self.split(grad)
        g1[...] = da.T @ x
        gb1[...] = da.sum(0)
        g2[...] = d.T @ a
        gb2[...] = d.sum(0)
        return loss

    def evaluate(self, theta):
        _, lp = self.forward(theta, self.xt)
        n = len(self.yt)
        return (float(-lp[np.arange(n), self.yt].sum()), n,
                int((lp.argmax(1) == self.yt).sum()))


class Bigram:
    def __init__(self):
        self.tensors = [["0.weight", [VOCAB, VOCAB]]]
        self.text, self.test_text = markov_text()
        self.hello = {"name": "exec-numpy-text", "classes": VOCAB, "train": TEXT,
                      "test": len(self.test_text), "positions": WINDOW}

    def init(self, seed, theta):
        theta[...] = np.random.default_rng(seed).normal(0, 0.02, size=theta.shape)

    def grad(self, theta, grad, idx):
        w = theta.reshape(VOCAB, VOCAB).astype(np.float64)
        off = idx[:, None] + np.arange(WINDOW)
        x, y = self.text[off].ravel(), self.text[off + 1].ravel()
        m = len(x)
        lp = logsoftmax(w[x])
        loss = -lp[np.arange(m), y].mean()
        d = np.exp(lp)
        d[np.arange(m), y] -= 1
        g = np.zeros((VOCAB, VOCAB))
        np.add.at(g, x, d / m)
        grad[...] = g.ravel()
        return loss

    def evaluate(self, theta):
        w = theta.reshape(VOCAB, VOCAB).astype(np.float64)
        x, y = self.test_text[:-1], self.test_text[1:]
        lp = logsoftmax(w[x])
        return (float(-lp[np.arange(len(x)), y].sum()), len(x),
                int((lp.argmax(1) == y).sum()))

    def predict(self, theta, ids, out):
        out[...] = logsoftmax(theta.reshape(VOCAB, VOCAB).astype(np.float64)[ids[-1]])


def main():
    a = parse()
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    if not a.print_stdout:
        os.dup2(2, 1)  # stray prints to stderr, as a child should
    model = Bigram() if a.text else MLP(17 if a.wrong_size and
                                        os.environ.get("GEM_TEST_OTHER") == "1" else 16)
    p = sum(int(np.prod(s)) for _, s in model.tensors)
    mm = theta = grad = None
    index_off = batch = 0
    count = {}
    for line in sys.stdin.buffer:
        if len(line) > MAX_LINE:
            reply = {"error": "a request longer than %d bytes" % MAX_LINE}
            out.write((json.dumps(reply) + "\n").encode())
            continue
        try:
            req = json.loads(line)
            op = req["op"]
        except (ValueError, KeyError, TypeError):
            out.write(b'{"error": "a request that is not a JSON object with op"}\n')
            continue
        count[op] = k = count.get(op, 0) + 1
        if a.stderr_chatter:
            sys.stderr.write("chatter: request %s #%d\n" % (op, k))
            sys.stderr.flush()
        if a.crash_at == (op, k):
            sys.stderr.write("exec-numpy: crashing in %s #%d\n" % (op, k))
            os._exit(3)
        if a.hang_at == (op, k):
            while True:
                time.sleep(3600)
        if a.print_stdout == (op, k):
            sys.stdout.write("hello from the model, on stdout\n")
            sys.stdout.flush()
        if a.garbage == (op, k):
            out.write(b"this is not JSON {\n")
            continue
        try:
            reply = {}
            if op == "hello":
                reply = dict(model.hello, protocol=1, tensors=model.tensors)
            elif op == "map":
                size, batch = req["size"], req["batch"]
                mm = mmap.mmap(3, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
                theta = np.frombuffer(mm, "<f4", p, req["theta"])
                grad = np.frombuffer(mm, "<f4", p, req["grad"])
                index_off = req["index"]
            elif op == "init":
                model.init(req["seed"], theta)
            elif op == "grad":
                n = req["n"]
                if not 0 < n <= batch:
                    raise ValueError("n %d: not in [1, batch %d]" % (n, batch))
                idx = np.frombuffer(mm, "<u8", n, index_off).astype(np.int64)
                if idx.max() >= model.hello["train"]:
                    raise ValueError("sample %d: not below %d" % (idx.max(), model.hello["train"]))
                loss = model.grad(theta, grad, idx)
                if a.nondeterministic:
                    noise = np.random.default_rng().normal(0, 1e-3, size=p)
                    grad += noise.astype(np.float32)
                    loss += float(noise[0])
                if a.nan_grad:
                    grad[p // 2] = np.nan
                if a.nan == "nan":
                    loss = float("nan")
                reply = {"loss": 1e39 if a.nan == "overflow" else float(np.float32(loss))}
            elif op == "eval":
                loss, cnt, correct = model.evaluate(theta)
                reply = {"loss": loss, "count": cnt, "correct": correct}
            elif op == "predict" and hasattr(model, "predict"):
                n = req["n"]
                ids = np.frombuffer(mm, "<u8", n, index_off).astype(np.int64)
                model.predict(theta, ids, grad[:VOCAB])
            else:
                reply = {"error": "unknown op %s" % json.dumps(op)}
        except (KeyError, TypeError, ValueError, OverflowError) as e:
            reply = {"error": "%s: %s: %s" % (op, type(e).__name__, e)}
        out.write((json.dumps(reply) + "\n").encode())
    if a.no_exit:
        while True:
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main())
