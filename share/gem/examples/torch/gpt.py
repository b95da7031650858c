#!/usr/bin/python3
"""The byte-level GPT of share/gem/models/gpt.json (875,520 parameters) in PyTorch, on a text
(default the King James Bible, /usr/share/datasets/kjv/kjv.txt), as gem's child.

    gem-init --model exec:'/usr/bin/python3 /abs/share/gem/examples/torch/gpt.py' run/

The same network as gem's built-in gpt (gem-model(5)): windows of T = 128 bytes, a token
embedding (256, 128) and learned positions (128, 128), 4 pre-LayerNorm blocks (x += attention
of LN(x), 4 heads, causal; x += dense 128→512, GELU (tanh approximation, as lib/nn/seq.c), dense
512→128 of LN(x)), a final LayerNorm (eps 1e-5), an untied dense 128→256, next-byte cross-entropy
at every position.  Every weight matrix drawn from N(0, 0.02²) (embedding and positions too),
biases 0, gains 1.  The parameters carry gem's names (0.weight, 1.weight, 2.0.weight, 2.1.weight,
2.1.bias, 2.1.out_weight, 2.1.out_bias, 3.1.weight, ..., 11.bias), in gem's order.

The text is split as gem splits it (lib/nn/data.c, DATA_TEXT_HOLD_OUT): training = the bytes
before ⌊len·9/10⌋, test = the rest.  A grad request's indices are window offsets into the
training text (below train − T, as gem draws them).

eval: gem's own evaluation of a text draws 20×32 windows from its RNG (lib/report/eval.c
eval_text); this child cannot draw the same, so it scores --eval-windows N windows (default
640, as many as gem's) at fixed offsets evenly spaced over the whole test text,
⌊k·(L−T−1)/(N−1)⌋ for k = 0..N−1, every position of each; --eval-windows 0 scores every
consecutive window (non-overlapping, offsets 0, T, 2T, ...): all the test text's bytes but the
tail, about 3,400 windows for kjv, ~5× slower.  The loss is the sum over the scored bytes, in
nats; bits per byte = loss/count/ln 2.

predict (gem-sample): the log-probabilities of the byte after the n ≤ 128 given.

Options: --text FILE, --limit N (the first N bytes of the training text only), --device,
--threads, --eval-windows N, --bench N (no child: time N plain PyTorch steps, batch --batch).
"""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.dont_write_bytecode = True  # no __pycache__ beside the module in a checkout
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
import gem_exec  # noqa: E402

TEXT = "/usr/share/datasets/kjv/kjv.txt"
HOLD_OUT = 10  # lib/nn/data.h DATA_TEXT_HOLD_OUT
T, C, HEADS, BLOCKS, HIDDEN, VOCAB = 128, 128, 4, 4, 512, 256
STD = 0.02


def build():
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Position(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(T, C))

        def forward(self, x):
            return x + self.weight[:x.shape[1]]

    class Attention(nn.Module):
        """gem's attention: qkv = x·Wᵀ + b (W (3C, C)), causal softmax of q·k/√(C/H) per head,
        then out_weight, out_bias."""

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.empty(3 * C, C))
            self.bias = nn.Parameter(torch.empty(3 * C))
            self.out_weight = nn.Parameter(torch.empty(C, C))
            self.out_bias = nn.Parameter(torch.empty(C))

        def forward(self, x):
            b, t, _ = x.shape
            d = C // HEADS
            q, k, v = F.linear(x, self.weight, self.bias).split(C, dim=2)
            q, k, v = (z.view(b, t, HEADS, d).transpose(1, 2) for z in (q, k, v))
            s = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            s = s.masked_fill(mask, float("-inf"))
            y = torch.softmax(s, dim=-1) @ v
            return F.linear(y.transpose(1, 2).reshape(b, t, C), self.out_weight, self.out_bias)

    class Residual(nn.Sequential):
        def forward(self, x):
            return x + super().forward(x)

    layers = [nn.Embedding(VOCAB, C), Position()]
    for _ in range(BLOCKS):
        layers.append(Residual(nn.LayerNorm(C), Attention()))
        layers.append(Residual(nn.LayerNorm(C), nn.Linear(C, HIDDEN), nn.GELU(approximate="tanh"),
                               nn.Linear(HIDDEN, C)))
    layers += [nn.LayerNorm(C), nn.Linear(C, VOCAB)]
    m = nn.Sequential(*layers)  # logits; the loss takes the log-softmax
    return m


def make_model(seed=None):
    """gem's gpt initialisation; serve() seeds torch with the run's seed before calling it."""
    import torch
    m = build()
    with torch.no_grad():
        for mod in m.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.fill_(1)
                mod.bias.zero_()
        for name, p in m.named_parameters():
            owner = m.get_submodule(name.rsplit(".", 1)[0])
            if isinstance(owner, torch.nn.LayerNorm):
                continue
            if name.endswith("bias"):
                p.zero_()
            else:
                p.normal_(0, STD)
    return m


def split_text(path):
    with open(path, "rb") as f:
        data = np.frombuffer(f.read(), np.uint8)
    cut = len(data) * (HOLD_OUT - 1) // HOLD_OUT
    return data[:cut], data[cut:]


def main():
    ap = argparse.ArgumentParser(description="The byte-level GPT on a text, as gem's child "
                                 "(gem-exec(7))")
    ap.add_argument("--text", default=TEXT)
    ap.add_argument("--limit", type=int, default=0, help="the first N training bytes only")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--eval-windows", type=int, default=640, metavar="N",
                    help="N windows evenly spaced over the test text (0: every consecutive one)")
    ap.add_argument("--eval-batch", type=int, default=32)
    ap.add_argument("--bench", type=int, default=0, metavar="N")
    ap.add_argument("--batch", type=int, default=32, help="--bench's batch")
    a = ap.parse_args()

    import torch
    import torch.nn.functional as F
    # before any work: a parallel region run now would leave an idle OpenMP team behind
    torch.set_num_threads(a.threads or int(os.environ.get("GEM_EXEC_THREADS", "1")))

    train, test = split_text(a.text)
    if a.limit:
        train = train[:a.limit]
    if len(train) <= T + 1:
        sys.exit("gpt.py: a training text of %d bytes has no window of %d" % (len(train), T))
    train_t = torch.from_numpy(train.copy())
    test_t = torch.from_numpy(test.copy())
    ar = torch.arange(T)

    def batch(idx):
        at = idx.view(-1, 1) + ar
        return train_t[at].long(), train_t[at + 1].long()

    def loss(out, y):
        return F.cross_entropy(out.reshape(-1, VOCAB), y.reshape(-1))

    L = len(test)
    if a.eval_windows > 0:
        n = a.eval_windows
        offs = [(k * (L - T - 1)) // max(n - 1, 1) for k in range(n)]
    else:
        offs = list(range(0, L - T, T))
    offs = torch.tensor(offs, dtype=torch.long)

    def evaluate(m):
        dev = next(m.parameters()).device
        total, count, correct = 0.0, 0, 0
        for s in range(0, len(offs), a.eval_batch):
            at = offs[s:s + a.eval_batch].view(-1, 1) + ar
            x, y = test_t[at].long().to(dev), test_t[at + 1].long().to(dev)
            out = m(x).reshape(-1, VOCAB)
            total += float(F.cross_entropy(out, y.reshape(-1), reduction="sum"))
            count += y.numel()
            correct += int((out.argmax(-1) == y.reshape(-1)).sum())
        return total, count, correct

    if a.bench:
        return bench(a, batch, loss, len(train))
    return gem_exec.serve(make_model, classes=VOCAB, batch=batch, loss=loss, train=len(train),
                          test=len(test), evaluate=evaluate, positions=T, name="torch-gpt",
                          device=a.device, threads=a.threads)


def bench(a, batch, loss, n):
    import torch
    torch.set_num_threads(a.threads or int(os.environ.get("GEM_EXEC_THREADS", "1")))
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(1)
    m = make_model(1).to(a.device)
    opt = torch.optim.SGD(m.parameters(), lr=0.01, momentum=0.9)
    rng = np.random.default_rng(1)
    idxs = [torch.from_numpy(rng.integers(0, n - T, a.batch)) for _ in range(a.bench)]
    times = []
    for idx in idxs:
        t0 = time.perf_counter()
        x, y = batch(idx)
        x, y = x.to(a.device), y.to(a.device)
        opt.zero_grad()
        L = loss(m(x), y)
        L.backward()
        opt.step()
        L.item()
        times.append(time.perf_counter() - t0)
    t = np.array(times) * 1e3
    print("plain PyTorch gpt: %d steps of batch %d: median %.2f ms (threads %d)"
          % (a.bench, a.batch, np.median(t), torch.get_num_threads()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
