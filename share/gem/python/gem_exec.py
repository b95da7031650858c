"""gem_exec: make a model a child of gem (gem-init --model exec:CMD), as gem-exec(7) says.

gem keeps the optimiser, the rules, the schedule and every checkpoint; the child only answers
hello, map, init, grad, eval and predict at the parameters θ that gem hands it, through memory
that both map (descriptor 3).  This module speaks that protocol so that a model is a child in a
few lines:

    import torch, gem_exec
    gem_exec.serve(make_model, classes=10,      # make_model(seed) -> torch.nn.Module
                   loss=torch.nn.functional.cross_entropy,
                   train=(x, y), test=(xt, yt))  # or batch=function(idx), train=count

or, for a model written without a framework, serve_numpy(...) with callbacks that get θ and
the gradient as NumPy views of the shared memory.

Standard library and NumPy only; PyTorch is imported by serve() alone.

Standard output is the protocol's: this module moves file descriptor 1 to a private one and
points descriptor 1 (and sys.stdout) at standard error, at import when it runs as gem's child
(GEM_EXEC_PROTOCOL in the environment) and in any case when serve() or serve_numpy() starts, so
a stray print() (the user's, or a library's) goes to gem's log and not into the pipe.
"""

import hashlib
import json
import math
import mmap
import os
import re
import struct
import sys
import time

import numpy as np

PROTOCOL = 1
MAX_LINE = 65536          # bytes of a request or reply, its newline included
MAX_TENSORS = 64
MAX_NAME = 31
_NAME_RE = re.compile(r"^[A-Za-z0-9._-]{1,31}$")
SHM_FD = 3

__all__ = ["serve", "serve_numpy", "Request", "views", "request_seed", "ProtocolError"]

_reply_file = None


def _take_stdout():
    """Keep the real descriptor 1 for replies; 1 and sys.stdout become standard error."""
    global _reply_file
    if _reply_file is not None:
        return _reply_file
    try:
        sys.stdout.flush()
    except Exception:
        pass
    fd = os.dup(1)
    os.set_inheritable(fd, False)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    _reply_file = os.fdopen(fd, "wb", buffering=0)
    return _reply_file


if os.environ.get("GEM_EXEC_PROTOCOL"):
    _take_stdout()


class ProtocolError(Exception):
    """Raised by a callback (or by this module) to answer the request with {"error": ...}."""


def _log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def request_seed(seed, worker, part, position):
    """A 63-bit seed from all four numbers a grad request names (gem-exec(7), grad): a child
    that seeds its dropout from it draws the same numbers when the run is resumed or replayed.
    A hash, not a sum, so that neighbouring requests get unrelated streams."""
    h = hashlib.blake2b(struct.pack("<QqqqQ", seed & (2 ** 64 - 1), worker, part[0], part[1],
                                    position & (2 ** 64 - 1)), digest_size=8)
    return int.from_bytes(h.digest(), "little") >> 1


class Request:
    """What a grad request names: n, worker, part (I, N), position, seed; and rng_seed, the
    seed to draw random numbers (dropout) from, and rng, a NumPy Generator seeded with it."""

    __slots__ = ("n", "worker", "part", "position", "seed", "rng_seed", "_rng")

    def __init__(self, msg):
        self.n = _int(msg, "n", 1, 2 ** 63)
        self.worker = _int(msg, "worker", -1, 2 ** 63)
        part = msg.get("part", [0, 1])
        if (not isinstance(part, list) or len(part) != 2 or
                not all(isinstance(v, int) and not isinstance(v, bool) for v in part)):
            raise ProtocolError("grad: part: not [I, N]")
        self.part = (part[0], part[1])
        self.position = _int(msg, "position", 0, 2 ** 64)
        self.seed = _int(msg, "seed", 0, 2 ** 64)
        self.rng_seed = request_seed(self.seed, self.worker, self.part, self.position)
        self._rng = None

    @property
    def rng(self):
        if self._rng is None:
            self._rng = np.random.default_rng(self.rng_seed)
        return self._rng


def _int(msg, key, lo, hi):
    v = msg.get(key)
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v < hi:
        raise ProtocolError("%s: %s: not an integer in [%d, %d)" % (msg.get("op"), key, lo, hi))
    return v


def _check_layout(tensors):
    """tensors: [(name, shape)] -> [(name, [dims])], or ValueError naming the first bad one."""
    out = []
    if not 1 <= len(tensors) <= MAX_TENSORS:
        raise _SetupError("the model has %d tensors (1 to %d)" % (len(tensors), MAX_TENSORS))
    total = 0
    seen = set()
    for name, shape in tensors:
        shape = [int(d) for d in shape] or [1]
        if not _NAME_RE.match(name):
            raise _SetupError("tensor name %r: 1 to 31 bytes of letters, digits and ._- (give "
                             "names=... to rename)" % name)
        if name in seen:
            raise _SetupError("tensor name %r twice" % name)
        seen.add(name)
        if not 1 <= len(shape) <= 4 or min(shape) < 1:
            raise _SetupError("tensor %s: shape %s (1 to 4 positive sizes)" % (name, shape))
        total += int(np.prod(shape))
        out.append((name, shape))
    if total > 2 ** 31:
        raise _SetupError("the model has %d parameters (at most 2^31)" % total)
    return out


def views(flat, tensors):
    """The tensors' views of a flat array (NumPy or torch), in order, each of its shape."""
    out, at = [], 0
    for _, shape in tensors:
        n = int(np.prod(shape))
        out.append(flat[at:at + n].reshape(shape))
        at += n
    return out


class _Shared:
    """The memory of descriptor 3, mapped as the map request says."""

    def __init__(self):
        self.mm = None
        self.size = 0

    def map(self, msg, p):
        size = _int(msg, "size", 1, 2 ** 63)
        off = {k: _int(msg, k, 0, 2 ** 63) for k in ("theta", "grad", "index")}
        batch = _int(msg, "batch", 0, 2 ** 31)
        for k, need in (("theta", 4 * p), ("grad", 4 * p), ("index", 8 * batch)):
            if off[k] % 64 or off[k] + need > size:
                raise ProtocolError("map: %s at %d (+%d bytes) is not a multiple of 64 inside "
                                    "%d bytes" % (k, off[k], need, size))
        try:
            mm = mmap.mmap(SHM_FD, size, flags=mmap.MAP_SHARED,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
        except (OSError, ValueError) as e:
            raise ProtocolError("map: cannot map descriptor %d for %d bytes: %s"
                                % (SHM_FD, size, e))
        # The old mapping goes when the last view of it does (a view pins it).
        self.mm, self.size = mm, size
        self.theta_off, self.grad_off, self.index_off = off["theta"], off["grad"], off["index"]
        self.batch = batch
        self.p = p
        self.theta = np.frombuffer(mm, dtype="<f4", count=p, offset=self.theta_off)
        self.grad = np.frombuffer(mm, dtype="<f4", count=p, offset=self.grad_off)

    def need(self, op):
        if self.mm is None:
            raise ProtocolError("%s before map" % op)

    def indices(self, n, op, below=None):
        """The n indices of a request as int64, each checked to be below below."""
        self.need(op)
        if n > self.batch:
            raise ProtocolError("%s: n %d is larger than the map's batch %d" % (op, n, self.batch))
        idx = np.frombuffer(self.mm, dtype="<u8", count=n, offset=self.index_off)
        if below is not None and n and int(idx.max()) >= below:
            raise ProtocolError("%s: index %d is not below %d" % (op, int(idx.max()), below))
        return idx.astype(np.int64)


def _loss_json(x, what="loss", f32=True):
    """x as a JSON number: a float32's shortest digits (a mean loss), or a double's (a sum)."""
    x = float(x)
    if not math.isfinite(x):
        raise ProtocolError("the %s is %r" % (what, x))
    return float(repr(np.float32(x))) if f32 and abs(x) < 3.4e38 else x


def _loop(handlers, exit=True, refuse=None):
    """Read requests from standard input until end of file; answer each on the reply pipe.
    At end of file: exit the process with status 0 at once (exit=True: Python's teardown with
    torch loaded took 2.7 s on a busy host, and gem kills a child still there after 2 s), or
    return 0."""
    out = _take_stdout()
    inp = sys.stdin.buffer
    timing = {} if os.environ.get("GEM_EXEC_TIMING") else None
    while True:
        line = inp.readline(MAX_LINE + 1)
        if timing is not None:
            t0, c0 = time.perf_counter(), time.thread_time()
        if not line:
            if timing is not None:
                _report_timing(timing)
            if exit:
                for f in (sys.stderr, sys.__stderr__):
                    try:
                        f.flush()
                    except Exception:
                        pass
                os._exit(0)
            return 0
        if len(line) > MAX_LINE or not line.endswith(b"\n"):
            # Too long (or cut by end of file): drop the rest of the line, answer an error.
            while line and not line.endswith(b"\n"):
                line = inp.readline(MAX_LINE + 1)
            reply = {"error": "a request longer than %d bytes" % MAX_LINE}
        elif refuse is not None:
            reply = {"error": refuse}
        else:
            reply = _answer(handlers, line)
        data = json.dumps(reply, allow_nan=False, separators=(", ", ": ")).encode() + b"\n"
        if len(data) > MAX_LINE:
            data = b'{"error": "the reply would be longer than 65536 bytes"}\n'
        out.write(data)
        if timing is not None and line:
            dt = (time.perf_counter() - t0, time.thread_time() - c0)
            timing.setdefault(_op_of(line), []).append(dt)


def _op_of(line):
    try:
        return str(json.loads(line).get("op"))
    except Exception:
        return "?"


def _report_timing(timing):
    """GEM_EXEC_TIMING=1: at end of file, each op's median time from its request read to its
    reply written (wall and this thread's CPU), on standard error."""
    for op, v in sorted(timing.items()):
        w = sorted(x[0] for x in v)
        c = sorted(x[1] for x in v)
        _log("gem_exec timing: %s: %d requests, median %.1f us wall, %.1f us CPU in the child"
             % (op, len(v), 1e6 * w[len(w) // 2], 1e6 * c[len(c) // 2]))


def _answer(handlers, line):
    try:
        msg = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        return {"error": "a request that is not JSON: %s" % e}
    if not isinstance(msg, dict):
        return {"error": "a request that is not a JSON object"}
    op = msg.get("op")
    h = handlers.get(op) if isinstance(op, str) else None
    if h is None:
        return {"error": "unknown op %s (this child answers %s)"
                % (json.dumps(op), ", ".join(sorted(handlers)))}
    try:
        r = h(msg)
        return {} if r is None else r
    except ProtocolError as e:
        return {"error": str(e)}
    except Exception as e:  # the model's own failure: name it, keep serving
        import traceback
        traceback.print_exc(file=sys.stderr)
        return {"error": "%s: %s: %s" % (op, type(e).__name__, e)}


def _hello_reply(msg, name, tensors, classes, train, test, positions):
    if msg.get("protocol") != PROTOCOL:
        raise ProtocolError("hello: protocol %r (this child speaks %d)"
                            % (msg.get("protocol"), PROTOCOL))
    r = {"protocol": PROTOCOL, "name": name, "classes": classes,
         "tensors": [[n, s] for n, s in tensors], "train": train, "test": test}
    if positions is not None:
        r["positions"] = positions
    return r


def _check_meta(name, classes, train, test, positions):
    if name is not None and (not isinstance(name, str) or not 1 <= len(name.encode()) <= 63):
        raise _SetupError("name %r: 1 to 63 bytes" % (name,))
    if not 2 <= int(classes) <= 65536:
        raise _SetupError("classes %r: 2 to 65536" % (classes,))
    if not 1 <= int(train) <= 2 ** 31 - 1:
        raise _SetupError("train %r: 1 to 2^31-1" % (train,))
    if not 0 <= int(test) <= 2 ** 31 - 1:
        raise _SetupError("test %r: 0 to 2^31-1" % (test,))
    if positions is not None and not 1 <= int(positions) <= 65536:
        raise _SetupError("positions %r: 1 to 65536" % (positions,))
    if positions is not None and int(train) <= int(positions):
        raise _SetupError("a text of %d tokens has no window of %d" % (train, positions))


def _default_name():
    return os.path.splitext(os.path.basename(sys.argv[0] or "model"))[0][:63] or "model"


def _guard(f, exit, *args):
    """Run a serve function.  A model that cannot be served (a bad layout, a BatchNorm, ...) is
    a ValueError before the first request: run by gem, the child then answers
    every request with {"error": why}, so gem's message says why; run by hand, it raises."""
    try:
        return f(*args)
    except _SetupError as e:
        if not os.environ.get("GEM_EXEC_PROTOCOL"):
            raise
        _log("gem_exec: %s" % e)
        _loop({}, exit, str(e))
        return 1


class _SetupError(ValueError):
    pass


# --------------------------------------------------------------------------------------------
# NumPy


def serve_numpy(tensors, classes, train, test, init, grad, evaluate, positions=None,
                predict=None, name=None, exit=True):
    return _guard(_serve_numpy, exit, tensors, classes, train, test, init, grad, evaluate,
                  positions, predict, name, exit)


def _serve_numpy(tensors, classes, train, test, init, grad, evaluate, positions=None,
                 predict=None, name=None, exit=True):
    """Serve a model written with NumPy (or anything that reads and writes arrays).

    tensors   [(name, shape)], in the order they lie in θ.
    classes, train, test, positions, name: as hello's reply (gem-exec(7)).
    init(seed, theta)                 write θ₀ for seed into theta (a list of per-tensor views).
    grad(theta, grad, idx, req)       -> mean loss; write the gradient into grad (per-tensor
                                      views, zeroed before the call).  idx: int64 indices (window
                                      offsets for a language model); req: a Request (req.rng to
                                      draw dropout from).
    evaluate(theta)                   -> (loss summed over the scored predictions, count,
                                      correct or None).
    predict(theta, ids, out)          optional: write the log-probabilities of the token after
                                      ids (classes floats) into out.
    theta and grad are views of the shared memory: valid during the call only (a later map may
    move them).  At end of file the process exits with status 0 (exit=False: returns 0).
    """
    tensors = _check_layout(tensors)
    name = name or _default_name()
    _check_meta(name, classes, train, test, positions)
    p = sum(int(np.prod(s)) for _, s in tensors)
    shm = _Shared()

    def h_hello(msg):
        return _hello_reply(msg, name, tensors, classes, train, test, positions)

    def h_map(msg):
        shm.map(msg, p)

    def h_init(msg):
        shm.need("init")
        seed = _int(msg, "seed", 0, 2 ** 64)
        init(seed, views(shm.theta, tensors))

    def h_grad(msg):
        req = Request(msg)
        idx = shm.indices(req.n, "grad", train - (positions or 0))
        g = shm.grad
        g.fill(0)
        loss = grad(views(shm.theta, tensors), views(g, tensors), idx, req)
        return {"loss": _loss_json(loss)}

    def h_eval(msg):
        shm.need("eval")
        r = evaluate(views(shm.theta, tensors))
        loss, count = r[0], r[1]
        out = {"loss": _loss_json(loss, "test loss", False), "count": int(count)}
        if len(r) > 2 and r[2] is not None:
            out["correct"] = int(r[2])
        return out

    handlers = {"hello": h_hello, "map": h_map, "init": h_init, "grad": h_grad, "eval": h_eval}
    if predict is not None:
        def h_predict(msg):
            n = _int(msg, "n", 1, (positions or 2 ** 31) + 1)
            ids = shm.indices(n, "predict", int(classes))
            if int(classes) > p:
                raise ProtocolError("predict: %d classes do not fit the gradient's %d floats"
                                    % (classes, p))
            predict(views(shm.theta, tensors), ids, shm.grad[:int(classes)])
        handlers["predict"] = h_predict
    return _loop(handlers, exit)


# --------------------------------------------------------------------------------------------
# PyTorch


def _torch():
    import torch
    return torch


def _to(x, device):
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x.to(device, non_blocking=True)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _count(y):
    return int(y.numel()) if hasattr(y, "numel") else len(y)


def serve(model, classes, loss, train, test=None, batch=None, evaluate=None, positions=None,
          predict=None, name=None, names=None, device="cpu", threads=None, eval_batch=500,
          deterministic=True, allow_buffers=False, copy=None, exit=True):
    return _guard(_serve_torch, exit, model, classes, loss, train, test, batch, evaluate,
                  positions, predict, name, names, device, threads, eval_batch, deterministic,
                  allow_buffers, copy, exit)


def _serve_torch(model, classes, loss, train, test=None, batch=None, evaluate=None,
                 positions=None, predict=None, name=None, names=None, device="cpu",
                 threads=None, eval_batch=500, deterministic=True, allow_buffers=False,
                 copy=None, exit=True):
    """Serve a torch.nn.Module as gem's child.  At end of file the process exits with status 0,
    at once, without Python's teardown (exit=False: returns 0).

    model     a function seed -> torch.nn.Module (best: init builds the module anew after
              torch.manual_seed(seed), so θ₀ is exactly what constructing it gives), or a
              torch.nn.Module (init then calls torch.manual_seed(seed) and the reset_parameters()
              of each submodule that has one: a parameter of a module without one is refused).
    classes   the number of classes (a language model: its vocabulary).
    loss      a function (output, targets) -> the mean loss over the batch (a 0-d tensor), e.g.
              torch.nn.functional.cross_entropy; for a language model the mean over n×T.
    train     the training data (inputs, targets), tensors indexed by sample; or, with batch,
              the number of training samples (a language model: tokens of its training text).
    batch     a function idx -> (inputs, targets); idx is a LongTensor on the CPU of sample
              indices (a language model: window offsets into the training text).  Tensors it
              returns are moved to device.  Default, with train=(x, y): (x[idx], y[idx]).
    test      (inputs, targets) of the test split, scored in chunks of eval_batch with loss
              (its mean times the chunk's count of targets) and argmax for correct; or give
    evaluate  a function module -> (loss summed, count, correct or None), called under
              torch.no_grad() with the module in eval mode, and test then the count (an int).
    positions a language model's window T (gem-exec(7), hello).
    predict   a function (module, ids LongTensor [1, n]) -> log-probabilities of the next token
              (classes values); default for a language model: log_softmax of module(ids)'s last
              position.
    name      the model's name (default: the script's base name).
    names     optional {torch name: gem name}, for names longer than 31 bytes.
    device    "cpu" (θ and the gradient are the shared memory itself: no copy) or e.g. "cuda:0"
              (θ copied to the device and the gradient back, once each per request).
    threads   torch's intra-op threads; default GEM_EXEC_THREADS or 1.  One thread is what a
              host running several workers wants; a result is reproducible for a fixed count
              (replay with the same).
    copy      None: θ and the gradient are copied to and from the module's own memory iff the
              device is not the CPU; True: on the CPU too (a module that must not alias the
              shared memory, e.g. one that rebinds its parameters itself).
    deterministic  torch.use_deterministic_algorithms(True) (and CUBLAS_WORKSPACE_CONFIG set
              for CUDA): replay bit for bit.
    allow_buffers  a module with buffers (BatchNorm's running statistics) keeps state outside
              θ, which gem neither sees nor checkpoints: refused, unless this is True; a buffer
              that changes during a grad request is an error either way.

    The parameters are those of module.named_parameters(), in that order; buffers are not
    parameters.  A grad request runs the module in train mode after torch.manual_seed(
    request_seed(seed, worker, part, position)), so dropout draws the same numbers on replay;
    eval and predict run it in eval mode under torch.no_grad().
    """
    _take_stdout()
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    if sys.byteorder != "little":
        raise _SetupError("θ is little-endian float32: torch on a big-endian host would need a copy")
    torch = _torch()
    if threads is None:
        threads = int(os.environ.get("GEM_EXEC_THREADS", "1"))
    torch.set_num_threads(max(1, int(threads)))
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    if deterministic:
        torch.use_deterministic_algorithms(True)
    device = torch.device(device)
    on_cpu = device.type == "cpu" if copy is None else not copy
    if isinstance(train, (tuple, list)):
        if len(train) != 2:
            raise _SetupError("train: (inputs, targets), or a count with batch")
        if batch is None:
            tx, ty = train
            batch = lambda idx: (tx[idx], ty[idx])  # noqa: E731
        train = _count(train[1])
    if batch is None:
        raise _SetupError("give train=(inputs, targets), or batch=function and train=count")

    factory = None
    if isinstance(model, torch.nn.Module):
        module = model
    elif callable(model):
        factory = model
        torch.manual_seed(0)
        module = factory(0)
    else:
        raise _SetupError("model: a torch.nn.Module or a function seed -> Module")
    module = module.to(device)
    module.train()
    params = list(module.named_parameters())
    names = names or {}
    tensors = _check_layout([(names.get(n, n), list(p.shape)) for n, p in params])
    p_total = sum(p.numel() for _, p in params)
    for n, prm in params:
        if prm.dtype != torch.float32:
            raise _SetupError("parameter %s is %s: gem's θ is float32" % (n, prm.dtype))
    if factory is None:
        owners = {id(q) for m in module.modules() if hasattr(m, "reset_parameters")
                  for q in m.parameters(recurse=False)}
        lone = [n for n, q in params if id(q) not in owners]
        if lone:
            raise _SetupError("parameters %s belong to modules without reset_parameters(): give "
                             "model as a function seed -> Module" % ", ".join(lone))
    bufs = [(n, b) for n, b in module.named_buffers()]
    if bufs and not allow_buffers:
        raise _SetupError("the module has buffers (%s): state outside θ that gem neither sees "
                         "nor checkpoints (BatchNorm's running statistics: use GroupNorm or "
                         "LayerNorm, or track_running_stats=False); a buffer that never changes "
                         "(a mask) may pass with allow_buffers=True"
                         % ", ".join(n for n, _ in bufs[:4]))
    buf_ref = [(n, b.detach().clone()) for n, b in bufs]

    if test is not None and evaluate is None:
        test_n = _count(test[1])
    elif evaluate is not None:
        if not isinstance(test, int):
            raise _SetupError("with evaluate, give test as the number of test samples (tokens)")
        test_n = test
    else:
        raise _SetupError("give test=(inputs, targets) or evaluate=function and test=count")
    name = name or _default_name()
    _check_meta(name, classes, train, test_n, positions)
    if predict is None and positions is not None:
        def predict(m, ids):
            return torch.log_softmax(m(ids)[0, -1].float(), dim=-1)

    shm = _Shared()
    state = {"theta": None, "grad": None}
    if not on_cpu:
        # The module's own flat θ and gradient on the device, each parameter a view of them.
        dev_theta = torch.zeros(p_total, dtype=torch.float32, device=device)
        dev_grad = torch.zeros(p_total, dtype=torch.float32, device=device)
        _bind(params, dev_theta, dev_grad)

    def h_hello(msg):
        return _hello_reply(msg, name, tensors, classes, train, test_n, positions)

    def h_map(msg):
        shm.map(msg, p_total)
        t = torch.frombuffer(shm.mm, dtype=torch.float32, count=p_total, offset=shm.theta_off)
        g = torch.frombuffer(shm.mm, dtype=torch.float32, count=p_total, offset=shm.grad_off)
        state["theta"], state["grad"] = t, g
        if on_cpu:
            _bind(params, t, g)

    def pull():
        if not on_cpu:
            dev_theta.copy_(state["theta"])

    def h_init(msg):
        shm.need("init")
        seed = _int(msg, "seed", 0, 2 ** 64)
        torch.manual_seed(seed)
        with torch.no_grad():
            if factory is not None:
                fresh = list(factory(seed).named_parameters())
                got = [(names.get(n, n), list(q.shape)) for n, q in fresh]
                if got != [(n, s) for n, s in tensors]:
                    raise ProtocolError("init: make_model(%d) has another layout than "
                                        "make_model(0)" % seed)
                flat = torch.cat([q.detach().reshape(-1).float().cpu() for _, q in fresh])
                state["theta"].copy_(flat)
                pull()
            else:
                for m in module.modules():
                    if hasattr(m, "reset_parameters"):
                        m.reset_parameters()
                if not on_cpu:
                    state["theta"].copy_(dev_theta)
                _rebind_check(params, state, on_cpu)

    def h_grad(msg):
        req = Request(msg)
        idx = torch.from_numpy(shm.indices(req.n, "grad", train - (positions or 0)))
        pull()
        g = state["grad"] if on_cpu else dev_grad
        g.zero_()
        torch.manual_seed(req.rng_seed)
        x, y = batch(idx)
        x, y = _to(x, device), _to(y, device)
        module.train()
        out = module(x)
        L = loss(out, y)
        L.backward()
        # backward adds into each .grad in place; a module that replaced one is copied back.
        gv = _views_of(g, params)
        for (n, q), v in zip(params, gv):
            if q.grad is None:
                q.grad = v
            elif q.grad.data_ptr() != v.data_ptr():
                v.copy_(q.grad)
                q.grad = v
        if not on_cpu:
            state["grad"].copy_(dev_grad)
        for n, ref in buf_ref:
            if not torch.equal(dict(module.named_buffers())[n], ref):
                raise ProtocolError("grad: buffer %s changed: the model keeps state outside θ"
                                    % n)
        return {"loss": _loss_json(L.item())}

    def h_eval(msg):
        shm.need("eval")
        pull()
        module.eval()
        torch.manual_seed(0)
        try:
            with torch.no_grad():
                if evaluate is not None:
                    r = evaluate(module)
                    total, count = float(r[0]), int(r[1])
                    correct = r[2] if len(r) > 2 else None
                else:
                    total, count, correct = 0.0, 0, 0
                    xt, yt = test
                    for s in range(0, test_n, eval_batch):
                        xb = _to(xt[s:s + eval_batch], device)
                        yb = _to(yt[s:s + eval_batch], device)
                        o = module(xb)
                        k = _count(yb)
                        total += float(loss(o, yb)) * k
                        count += k
                        correct += int((o.argmax(-1) == yb).sum())
        finally:
            module.train()
        out = {"loss": _loss_json(total, "test loss", False), "count": count}
        if correct is not None:
            out["correct"] = int(correct)
        return out

    handlers = {"hello": h_hello, "map": h_map, "init": h_init, "grad": h_grad, "eval": h_eval}
    if predict is not None:
        def h_predict(msg):
            n = _int(msg, "n", 1, (positions or 2 ** 31) + 1)
            if classes > p_total:
                raise ProtocolError("predict: %d classes do not fit %d floats" % (classes, p_total))
            ids = torch.from_numpy(shm.indices(n, "predict", classes))
            pull()
            module.eval()
            try:
                with torch.no_grad():
                    lp = predict(module, _to(ids.view(1, -1), device))
            finally:
                module.train()
            state["grad"][:classes].copy_(lp.reshape(-1)[:classes].float().cpu())
        handlers["predict"] = h_predict
    return _loop(handlers, exit)


def _views_of(flat, params):
    out, at = [], 0
    for _, q in params:
        n = q.numel()
        out.append(flat[at:at + n].view(q.shape))
        at += n
    return out


def _bind(params, theta, grad):
    """Each parameter's data and gradient become views of the flat θ and gradient."""
    for (_, q), tv, gv in zip(params, _views_of(theta, params), _views_of(grad, params)):
        q.data = tv
        q.grad = gv


def _rebind_check(params, state, on_cpu):
    """After reset_parameters(): a module that assigned new tensors instead of writing in place
    has its values copied into θ and is bound to the views again."""
    if not on_cpu:
        return
    for (_, q), tv in zip(params, _views_of(state["theta"], params)):
        if q.data.data_ptr() != tv.data_ptr():
            tv.copy_(q.data)
            q.data = tv


serve.__doc__ = _serve_torch.__doc__
serve_numpy.__doc__ = _serve_numpy.__doc__
