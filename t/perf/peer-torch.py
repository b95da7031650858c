#!/usr/bin/python3
"""peer-torch: the PyTorch peer of bench-train's model figures. Builds a gem model spec
(share/gem/models/*.json, gem-model(5)) as a PyTorch module, layer for layer (the same sizes and
initialisation rules: dense and conv2d PyTorch's defaults, or N(0, init_std^2) weights and zero
biases where the spec gives init_std; embedding, position and attention N(0, init_std^2), default
0.02, biases 0; norms' gains 1 and biases 0; GELU's tanh form; causal attention as a PyTorch 1.13
user writes it), and times what bench-train times: a training step (forward, mean NLL loss,
backward into the parameters' gradients; no optimiser update) at batch 64 (32 windows for a
sequence model) and evaluation (forward, summed loss and argmax, no autograd) at batch 1000 (32),
on random inputs and labels, the first step not counted.

Usage: peer-torch.py SECS SPEC THREADS [NAME]. Prints bench-train's rows (TSV: what, shape,
value, unit). With THREADS 1 the rates are per second of the process's CPU time (as bench-train's
one-thread figures are per second of its thread's), otherwise per second of wall-clock time."""
import json
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def normal_(t, std):
    with torch.no_grad():
        t.normal_(0.0, std)


class Position(nn.Module):
    def __init__(self, T, C, std):
        super().__init__()
        self.P = nn.Parameter(torch.empty(T, C))
        normal_(self.P, std)

    def forward(self, x):
        return x + self.P


class Attention(nn.Module):
    def __init__(self, T, C, heads, std):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(C, 3 * C)
        self.out = nn.Linear(C, C)
        for lin in (self.qkv, self.out):
            normal_(lin.weight, std)
            nn.init.zeros_(lin.bias)
        self.register_buffer("mask", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, x):
        B, T, C = x.shape
        H = self.heads
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, H, C // H).transpose(1, 2) for t in (q, k, v))
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(C // H))
        a = F.softmax(a.masked_fill(self.mask[:T, :T], float("-inf")), dim=-1)
        return self.out((a @ v).transpose(1, 2).reshape(B, T, C))


class Residual(nn.Module):
    def __init__(self, f, s):
        super().__init__()
        self.f, self.s = f, s

    def forward(self, x):
        return self.f(x) + (self.s(x) if self.s is not None else x)


class Gelu(nn.Module):
    def forward(self, x):
        return F.gelu(x, approximate="tanh")


def build(layers, shape):
    """The layers of a spec's array as an nn.Sequential, and the shape after them: (C, H, W)
    for an image, (F,) flat, ("seq", T, C) a sequence."""
    mods = []
    for l in layers:
        t = l["type"]
        std = l.get("init_std")
        if t == "dense":
            fin = shape[-1] if shape[0] == "seq" else math.prod(shape)
            m = nn.Linear(fin, l["out"])
            if std is not None:
                normal_(m.weight, std)
                nn.init.zeros_(m.bias)
            shape = ("seq", shape[1], l["out"]) if shape[0] == "seq" else (l["out"],)
        elif t == "conv2d":
            c, h, w = shape
            k, st, pad = l["kernel"], l.get("stride", 1), l.get("padding", 0)
            m = nn.Conv2d(c, l["out"], k, stride=st, padding=pad)
            if std is not None:
                normal_(m.weight, std)
                nn.init.zeros_(m.bias)
            shape = (l["out"], (h + 2 * pad - k) // st + 1, (w + 2 * pad - k) // st + 1)
        elif t in ("maxpool2d", "avgpool2d"):
            k = l.get("size", 2)
            m = nn.MaxPool2d(k) if t == "maxpool2d" else nn.AvgPool2d(k)
            shape = (shape[0], shape[1] // k, shape[2] // k)
        elif t == "globalavgpool":
            m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
            shape = (shape[0],)
        elif t == "relu":
            m = nn.ReLU()
        elif t == "tanh":
            m = nn.Tanh()
        elif t == "sigmoid":
            m = nn.Sigmoid()
        elif t == "gelu":
            m = Gelu()
        elif t == "dropout":
            m = nn.Dropout(l.get("p", 0.5))
        elif t == "dropout2d":
            m = nn.Dropout2d(l.get("p", 0.5))
        elif t == "flatten":
            m = nn.Flatten()
            shape = (math.prod(shape),)
        elif t == "logsoftmax":
            m = nn.LogSoftmax(dim=-1)
        elif t == "groupnorm":
            m = nn.GroupNorm(l["groups"], shape[0], eps=1e-5)
        elif t == "layernorm":
            m = nn.LayerNorm(shape[-1], eps=1e-5)
        elif t == "embedding":
            m = nn.Embedding(l["vocab"], l["dim"])
            normal_(m.weight, std if std is not None else 0.02)
            shape = ("seq", shape[0], l["dim"])
        elif t == "position":
            m = Position(shape[1], shape[2], std if std is not None else 0.02)
        elif t == "attention":
            m = Attention(shape[1], shape[2], l["heads"], std if std is not None else 0.02)
        elif t == "residual":
            f, out = build(l["layers"], shape)
            s = build(l["shortcut"], shape)[0] if "shortcut" in l else None
            m, shape = Residual(f, s), out
        else:
            raise SystemExit(f"peer-torch: layer type {t} not mirrored")
        mods.append(m)
    return nn.Sequential(*mods), shape


def main():
    if len(sys.argv) not in (4, 5):
        raise SystemExit("usage: peer-torch.py SECS SPEC THREADS [NAME]")
    secs, threads = float(sys.argv[1]), int(sys.argv[3])
    with open(sys.argv[2]) as f:
        spec = json.load(f)
    name = sys.argv[4] if len(sys.argv) > 4 else spec.get("name", "model")
    torch.set_num_threads(threads)
    clock = time.process_time if threads == 1 else time.perf_counter
    torch.manual_seed(42)
    inp, K = spec["input"], spec["classes"]
    model, _ = build(spec["layers"], tuple(inp))
    seq = spec["layers"][0]["type"] == "embedding"
    L = inp[0] if seq else 1
    B, E = (32, 32) if seq else (64, 1000)
    S = max(E, 4 * B)
    if seq:
        x = torch.randint(0, spec["layers"][0]["vocab"], (S, L))
        y = torch.randint(0, K, (S, L))
    else:
        x = torch.rand(S, *inp) - 0.5
        y = torch.randint(0, K, (S,))
    unit = "tokens" if seq else "samples"

    def train_step(off):
        for p in model.parameters():
            p.grad = None
        out = model(x[off:off + B])
        loss = F.nll_loss(out.reshape(-1, K), y[off:off + B].reshape(-1))
        loss.backward()
        return loss.item()

    model.train()
    train_step(0)  # the first step's allocations: not counted
    steps, t0 = 0, clock()
    while True:
        train_step((steps % (S // B)) * B)
        steps += 1
        t = clock() - t0
        if t >= secs:
            break
    print(f"train\t{name} batch {B}\t{steps * B * L / t:.0f}\t{unit}/s", flush=True)

    model.eval()

    def evaluate():
        with torch.inference_mode():
            out = model(x[:E]).reshape(-1, K)
            lab = y[:E].reshape(-1)
            loss = F.nll_loss(out, lab, reduction="sum").item()
            return loss, int((out.argmax(1) == lab).sum())

    evaluate()
    evals, t0 = 0, clock()
    while True:
        evaluate()
        evals += 1
        t = clock() - t0
        if t >= secs:
            break
    print(f"eval\t{name} batch {E}\t{evals * E * L / t:.0f}\t{unit}/s", flush=True)
    nparams = sum(p.numel() for p in model.parameters())
    print(f"peer-torch: {name}: {nparams} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
