#!/usr/bin/python3
"""A mini gem for testing an external model (gem-exec(7)) without gem: start CMD as the page
says (/bin/sh -c, fds 0/1/2/3, GEM_EXEC_PROTOCOL=1, its own process group), ask hello, map,
init, grad (a few SGD steps, a remap to a larger batch, a repeated request to check that the
child is deterministic), eval and, for a language model, predict; check every reply; print a
summary.  Exit status 0 when the child passed, 1 when it failed (the first failure named), 2 on
a usage error.  With --expect KIND it passes only when the child fails that way (to test the bad
children of t/exec-numpy.py): crash, timeout, garbage, error, layout, nonfinite,
nondeterministic, hang-at-eof, protocol.  --bench N times N grad round trips.

    t/exec-drive.py [options] 'CMD ...'
    t/exec-drive.py --bench 500 --batch 64 '/usr/bin/python3 share/gem/examples/torch/cnn.py'
    t/exec-drive.py --expect crash '/usr/bin/python3 t/exec-numpy.py --crash-at=grad:3'
"""

import argparse
import json
import math
import mmap
import os
import select
import signal
import subprocess
import sys
import threading
import time

import numpy as np

MAX_LINE = 65536


class Fail(Exception):
    def __init__(self, kind, msg):
        super().__init__(msg)
        self.kind = kind


def align64(n):
    return (n + 63) // 64 * 64


class Child:
    def __init__(self, cmd, timeout, env=None, quiet=False):
        self.cmd, self.timeout = cmd, timeout
        self.name = os.path.basename(cmd.split()[0]) if cmd.split() else "child"
        self.fd = os.memfd_create("gem-exec", 0)  # size 0 until map
        e = dict(os.environ)
        e["GEM_EXEC_PROTOCOL"] = "1"
        e.update(env or {})
        fd = self.fd

        def child_fds():
            os.dup2(fd, 3)  # dup2 clears close-on-exec on 3

        self.p = subprocess.Popen(["/bin/sh", "-c", cmd], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=e,
                                  close_fds=False, preexec_fn=child_fds, process_group=0)
        self.buf = b""
        self.quiet = quiet
        self.eof_wait = 2.0  # gem's
        self.err_lines = 0
        self.t = threading.Thread(target=self._stderr, daemon=True)
        self.t.start()
        self.mm = None
        self.last = None

    def _stderr(self):
        for line in self.p.stderr:
            self.err_lines += 1
            if not self.quiet:
                sys.stderr.write("%s[%d]: %s" % (self.name, self.p.pid, line.decode("utf-8",
                                                                                 "replace")))
                if not line.endswith(b"\n"):
                    sys.stderr.write("\n")

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()

    def close(self):
        """Close the child's stdin; it must exit with status 0 within 2 s."""
        self.p.stdin.close()
        try:
            rc = self.p.wait(self.eof_wait)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Fail("hang-at-eof", "did not exit within %g s of end of file (killed)" % self.eof_wait)
        finally:
            self.t.join(1)
        if rc != 0:
            raise Fail("crash", "exited with status %d at end of file" % rc)

    def request(self, msg, raw=None):
        """Send msg (or raw bytes), return the reply as a dict (an error reply raises)."""
        line = raw if raw is not None else (json.dumps(msg) + "\n").encode()
        self.last = msg.get("op") if msg else "raw"
        try:
            self.p.stdin.write(line)
            self.p.stdin.flush()
        except BrokenPipeError:
            self._died()
        return self._reply()

    def _died(self):
        rc = self.p.wait()
        how = "killed by signal %d" % -rc if rc < 0 else "exited with status %d" % rc
        raise Fail("crash", "%s during %s" % (how, self.last))

    def _reply(self):
        deadline = time.monotonic() + self.timeout
        fd = self.p.stdout.fileno()
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                raise Fail("garbage", "%s: a reply longer than %d bytes" % (self.last, MAX_LINE))
            left = deadline - time.monotonic()
            r, _, _ = select.select([fd], [], [], max(left, 0))
            if not r:
                self.kill()
                raise Fail("timeout", "no reply to %s within %g s (killed)"
                           % (self.last, self.timeout))
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                self._died()
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        if len(line) + 1 > MAX_LINE:
            raise Fail("garbage", "%s: a reply longer than %d bytes" % (self.last, MAX_LINE))
        try:
            r = json.loads(line)  # Python's json takes NaN; a loss of NaN is caught below
        except ValueError:
            raise Fail("garbage", "%s: a reply that is not JSON: %r" % (self.last, line[:80]))
        if not isinstance(r, dict):
            raise Fail("garbage", "%s: a reply that is not a JSON object: %r"
                       % (self.last, line[:80]))
        if "error" in r:
            raise Fail("error", "%s: the child says: %s" % (self.last, r["error"]))
        return r


def need(cond, kind, msg):
    if not cond:
        raise Fail(kind, msg)


def check_hello(r):
    need(r.get("protocol") == 1, "layout", "hello: protocol %r" % r.get("protocol"))
    t = r.get("tensors")
    need(isinstance(t, list) and 1 <= len(t) <= 64, "layout", "hello: tensors: 1 to 64")
    total = 0
    for e in t:
        need(isinstance(e, list) and len(e) == 2 and isinstance(e[0], str) and
             1 <= len(e[0].encode()) <= 31 and
             all(c.isascii() and (c.isalnum() or c in "._-") for c in e[0]),
             "layout", "hello: tensor %r" % (e,))
        s = e[1]
        need(isinstance(s, list) and 1 <= len(s) <= 4 and
             all(isinstance(d, int) and d >= 1 for d in s), "layout",
             "hello: tensor %s: shape %r" % (e[0], s))
        total += int(np.prod(s))
    need(total <= 2 ** 31, "layout", "hello: %d parameters" % total)
    c = r.get("classes")
    need(isinstance(c, int) and 2 <= c <= 65536, "layout", "hello: classes %r" % c)
    need(isinstance(r.get("train"), int) and 1 <= r["train"] < 2 ** 31, "layout",
         "hello: train %r" % r.get("train"))
    need(isinstance(r.get("test"), int) and 0 <= r["test"] < 2 ** 31, "layout",
         "hello: test %r" % r.get("test"))
    pos = r.get("positions")
    need(pos is None or (isinstance(pos, int) and 1 <= pos <= 65536 and r["train"] > pos),
         "layout", "hello: positions %r" % pos)
    name = r.get("name")
    need(name is None or (isinstance(name, str) and 1 <= len(name.encode()) <= 63), "layout",
         "hello: name %r" % name)
    return total


def finite_loss(r, what):
    loss = r.get("loss")
    need(isinstance(loss, (int, float)) and not isinstance(loss, bool), "garbage",
         "%s: no loss in %r" % (what, r))
    need(math.isfinite(loss) and math.isfinite(float(np.float32(loss))), "nonfinite",
         "%s: loss %r is not finite (as a float32)" % (what, loss))
    return float(np.float32(loss))


class Session:
    def __init__(self, child, p, batch):
        self.c, self.p = child, p
        self.map(batch)

    def map(self, batch):
        p = self.p
        self.theta_off = 0
        self.grad_off = align64(4 * p)
        self.index_off = align64(self.grad_off + 4 * p)
        size = align64(self.index_off + 8 * batch)
        os.ftruncate(self.c.fd, size)
        self.mm = mmap.mmap(self.c.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.theta = np.frombuffer(self.mm, "<f4", p, self.theta_off)
        self.grad = np.frombuffer(self.mm, "<f4", p, self.grad_off)
        self.index = np.frombuffer(self.mm, "<u8", batch, self.index_off)
        self.batch = batch
        r = self.c.request({"op": "map", "size": size, "theta": 0, "grad": self.grad_off,
                            "index": self.index_off, "batch": batch})
        return r

    def step(self, idx, worker, part, position, seed, check=True):
        n = len(idx)
        self.index[:n] = idx
        if check:
            self.grad[:] = np.float32(np.nan)  # the child must write all P floats
        r = self.c.request({"op": "grad", "n": n, "worker": worker, "part": list(part),
                            "position": position, "seed": seed})
        loss = finite_loss(r, "grad at position %d" % position)
        need(not check or bool(np.isfinite(self.grad).all()), "nonfinite",
             "grad at position %d: %d of %d gradient values are not finite (or not written)"
             % (position, int((~np.isfinite(self.grad)).sum()), self.p))
        return loss


def draw(rng, hello, n):
    t = hello.get("positions")
    hi = hello["train"] - t if t else hello["train"]
    return rng.integers(0, hi, size=n, dtype=np.uint64)


def run(a):
    c = Child(a.cmd, a.timeout, quiet=a.quiet)
    c.eof_wait = a.eof_wait
    try:
        return session(c, a)
    except BaseException:
        if c.p.poll() is None:
            c.kill()
        raise


class Out(list):
    """The summary's lines, printed as they come (a failure later keeps them)."""

    def append(self, line):
        print(line, flush=True)
        super().append(line)


def session(c, a):
    out = Out()
    hello = c.request({"op": "hello", "protocol": 1})
    p = check_hello(hello)
    out.append("hello: %s, %d tensors, %d parameters, classes %d, train %d, test %d%s"
               % (hello.get("name"), len(hello["tensors"]), p, hello["classes"],
                  hello["train"], hello["test"],
                  ", positions %d" % hello["positions"] if "positions" in hello else ""))
    s = Session(c, p, a.batch)
    # init twice with a seed (the same θ), once with another (another θ)
    s.theta[:] = np.nan
    c.request({"op": "init", "seed": a.seed})
    need(bool(np.isfinite(s.theta).all()), "nonfinite", "init: θ has non-finite values")
    th0 = s.theta.copy()
    c.request({"op": "init", "seed": a.seed + 1})
    other = s.theta.copy()
    s.theta[:] = 0
    c.request({"op": "init", "seed": a.seed})
    need(np.array_equal(s.theta, th0), "nondeterministic", "init: seed %d gave another θ "
         "the second time" % a.seed)
    out.append("init: seed %d twice the same θ (%s); seed %d another (%s)"
               % (a.seed, "ok", a.seed + 1, "ok" if not np.array_equal(other, th0) else
                  "THE SAME"))
    rng = np.random.default_rng(a.seed)
    losses, position = [], 0
    for step in range(a.steps):
        if step == a.steps // 2 and a.remap:
            s.map(2 * a.batch)  # a larger batch: the child maps anew
        n = s.batch
        idx = draw(rng, hello, n)
        loss = s.step(idx, a.worker, (0, 1), position, a.seed)
        if a.check_repeat and step in (0, a.steps - 1):
            g1 = s.grad.copy()
            loss2 = s.step(idx, a.worker, (0, 1), position, a.seed)
            need(loss2 == loss and np.array_equal(g1, s.grad), "nondeterministic",
                 "grad at position %d: the same request answered differently (loss %r, then %r;"
                 " %d gradient values differ)" % (position, loss, loss2,
                                                  int((g1 != s.grad).sum())))
        position += n
        s.theta -= np.float32(a.lr) * s.grad
        losses.append(loss)
    if losses:
        out.append("grad: %d steps (batch %d%s), loss %.4f -> %.4f; repeated requests "
                   "identical" % (len(losses), a.batch, ", then %d after a remap" % (2 * a.batch)
                                  if a.remap else "", losses[0], losses[-1]))
    if a.eval:
        t0 = time.monotonic()
        r = c.request({"op": "eval"})
        dt = time.monotonic() - t0
        loss = r.get("loss")
        need(isinstance(loss, (int, float)) and math.isfinite(loss), "nonfinite",
             "eval: loss %r" % loss)
        need(isinstance(r.get("count"), int) and r["count"] > 0, "garbage",
             "eval: count %r" % r.get("count"))
        line = "eval: %d predictions, mean loss %.4f nats" % (r["count"], loss / r["count"])
        if "positions" in hello:
            line += " (%.4f bits per token)" % (loss / r["count"] / math.log(2))
        if "correct" in r:
            need(isinstance(r["correct"], int) and 0 <= r["correct"] <= r["count"], "garbage",
                 "eval: correct %r" % r["correct"])
            line += ", accuracy %.4f" % (r["correct"] / r["count"])
        out.append(line + " (%.2f s)" % dt)
    if a.predict or (a.predict is None and "positions" in hello):
        n = min(hello["positions"], s.batch, 12)
        ids = draw(rng, hello, 1)  # any ids below classes: take the bytes 0..n-1 mod classes
        s.index[:n] = (np.arange(n, dtype=np.uint64) + ids[0]) % hello["classes"]
        s.grad[:] = np.nan
        c.request({"op": "predict", "n": n})
        lp = s.grad[:hello["classes"]].astype(np.float64)
        need(bool(np.isfinite(lp).all()), "nonfinite", "predict: non-finite log-probabilities")
        z = float(np.exp(lp).sum())
        need(abs(z - 1) < 1e-3, "garbage", "predict: the probabilities sum to %g" % z)
        out.append("predict: %d ids -> %d log-probabilities (sum of probabilities %.6f)"
                   % (n, hello["classes"], z))
    if a.bench:
        n = a.batch
        if s.batch < n:
            s.map(n)
        times, trips = [], []
        idxs = [draw(rng, hello, n) for _ in range(a.bench)]
        lr = np.float32(a.lr)
        for k in range(a.bench):
            t0 = time.perf_counter()
            s.step(idxs[k], a.worker, (0, 1), position, a.seed, check=False)
            t1 = time.perf_counter()
            s.grad *= lr  # θ -= lr·g without a temporary
            s.theta -= s.grad
            times.append(time.perf_counter() - t0)
            trips.append(t1 - t0)
            position += n
        t, r = np.array(times) * 1e6, np.array(trips) * 1e6
        out.append("bench: %d grad steps of batch %d: median %.1f us a step (p10 %.1f, p90 %.1f)"
                   ", of which the request's round trip %.1f us (p10 %.1f) and the rest this "
                   "driver's SGD update" % (a.bench, n, np.median(t), np.percentile(t, 10),
                                            np.percentile(t, 90), np.median(r),
                                            np.percentile(r, 10)))
    if a.protocol_errors:
        for what, raw in (("an unknown op", b'{"op": "frobnicate"}\n'),
                          ("a line that is not JSON", b"not json\n"),
                          ("a line too long", b'{"op": "hello", "pad": "' + b"x" * MAX_LINE +
                           b'"}\n'),
                          ("grad without n", b'{"op": "grad"}\n')):
            try:
                c.request({"op": what}, raw=raw)
                raise Fail("protocol", "%s: answered without an error" % what)
            except Fail as e:
                if e.kind != "error":
                    raise
        # still serving after those
        c.request({"op": "hello", "protocol": 1})
        out.append("errors: unknown op, not JSON, a line too long, a missing field: each "
                   "answered {\"error\": ...}, the child still serving")
    t0 = time.monotonic()
    c.close()
    out.append("eof: exited with status 0 (%.2f s after end of file)" % (time.monotonic() - t0))
    return hello, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cmd")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--worker", type=int, default=-1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--eof-wait", type=float, default=2.0,
                    help="seconds the child has to exit after end of file (gem's: 2)")
    ap.add_argument("--no-eval", dest="eval", action="store_false")
    ap.add_argument("--no-remap", dest="remap", action="store_false")
    ap.add_argument("--no-repeat", dest="check_repeat", action="store_false",
                    help="do not repeat a grad request to check determinism")
    ap.add_argument("--predict", action="store_true", default=None,
                    help="ask predict (default: when hello gives positions)")
    ap.add_argument("--no-protocol-errors", dest="protocol_errors", action="store_false",
                    help="do not send an unknown op, a non-JSON line, a line too long")
    ap.add_argument("--bench", type=int, default=0, metavar="N",
                    help="time N grad round trips (each with an SGD update here)")
    ap.add_argument("--again-env", metavar="K=V", action="append", default=[],
                    help="start the child a second time with K=V in its environment; its "
                         "hello must give the first one's layout and data")
    ap.add_argument("--expect", metavar="KIND",
                    help="pass only if the child fails this way: crash, timeout, garbage, "
                         "error, layout, nonfinite, nondeterministic, hang-at-eof, protocol")
    ap.add_argument("-q", "--quiet", action="store_true", help="hide the child's stderr")
    a = ap.parse_args()
    try:
        hello, out = run(a)
        if a.again_env:
            out = Out()
            env = dict(kv.split("=", 1) for kv in a.again_env)
            c = Child(a.cmd, a.timeout, env=env, quiet=a.quiet)
            try:
                h2 = c.request({"op": "hello", "protocol": 1})
            except BaseException:
                c.kill()
                raise
            for k in ("tensors", "classes", "train", "test", "positions"):
                if h2.get(k) != hello.get(k):
                    c.kill()
                    raise Fail("layout", "hello again (%s): %s %s, the first time %s"
                               % (" ".join(a.again_env), k, json.dumps(h2.get(k))[:200],
                                  json.dumps(hello.get(k))[:200]))
            c.close()
            out.append("again (%s): the same layout and data" % " ".join(a.again_env))
    except Fail as e:
        msg = "exec-drive: %s: %s [%s]" % (a.cmd, e, e.kind)
        if a.expect:
            if e.kind == a.expect:
                print("ok: failed as expected: %s" % msg)
                return 0
            print("FAIL: expected %s, got %s" % (a.expect, msg))
            return 1
        print(msg)
        return 1
    if a.expect:
        print("FAIL: expected the child to fail (%s); it passed" % a.expect)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
