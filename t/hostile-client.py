#!/usr/bin/env python3
"""A hostile client of gem-serve (t6210): classes of bad requests, TAP on stdout.

GEM_TOKEN=TOKEN hostile-client.py URL

It joins one honest worker with the token and commits now and then. After every bad request it
checks that the server still answers GET /v1/health and that the version and θ (the bytes of
GET /v1/params?codec=raw) changed only by the honest commits. Bad requests that are well-formed
HTTP must get a 4xx JSON error. The connection floods are bounded (600 connections).
"""
import hashlib, json, os, socket, struct, sys, urllib.parse, zlib

URL, TOKEN = sys.argv[1], os.environ["GEM_TOKEN"]
HOST = urllib.parse.urlparse(URL).hostname
PORT = urllib.parse.urlparse(URL).port
AUTH = "Authorization: Bearer %s\r\n" % TOKEN
n_test = 0
failed = 0


def tap(ok, what):
    global n_test, failed
    n_test += 1
    failed += not ok
    print("%s %d - %s" % ("ok" if ok else "not ok", n_test, what), flush=True)


def send(data, timeout=10):
    """Send raw bytes on a fresh connection; (status or None, body bytes)."""
    try:
        s = socket.create_connection((HOST, PORT), timeout=timeout)
    except OSError:
        return None, b""
    try:
        s.sendall(data)
        s.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    out = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ")[1])
    except (IndexError, ValueError):
        status = None
    return status, body


def request(method, path, body=b"", headers="", auth=True):
    h = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" % (method, path)
    h += (AUTH if auth else "") + headers
    if body is not None:
        h += "Content-Length: %d\r\n" % len(body)
    return send(h.encode("latin-1") + b"\r\n" + (body or b""))


def message(head, blobs):
    """A gem message: the header line, then the blobs' bytes."""
    head = dict(head)
    head["blobs"] = [b for b, _ in blobs]
    return json.dumps(head, separators=(",", ":")).encode() + b"\n" + b"".join(d for _, d in blobs)


def update(vals, codec="raw", raw=None):
    raw = raw if raw is not None else struct.pack("<%df" % len(vals), *vals)
    data = raw if codec == "raw" else zlib.compress(raw, 9)
    meta = {"name": "update", "codec": codec, "count": len(raw) // 4, "size": len(data),
            "crc32": zlib.crc32(raw)}
    return meta, data


# ---- the honest side ----
status, body = request("POST", "/v1/join", b"{}")
assert status == 200, (status, body)
joined = json.loads(body.split(b"\n")[0])
W = joined["worker"]
N = joined["blobs"][0]["count"]
seq = 0


def theta():
    status, body = request("GET", "/v1/params?codec=raw", None, auth=False)
    assert status == 200, status
    head, _, data = body.partition(b"\n")
    return json.loads(head)["version"], hashlib.sha256(data).hexdigest()


expect = theta()


def honest_commit():
    global seq, expect
    seq += 1
    st, body = request("POST", "/v1/commit",
                       message({"worker": W, "base": expect[0], "seq": seq, "samples": 4,
                                "loss": 1.0}, [update([0.001] * N)]))
    v = theta()
    tap(st == 200 and v[0] == expect[0] + 1 and v[1] != expect[1],
        "an honest commit is applied (version %d -> %d)" % (expect[0], v[0]))
    expect = v


def check(what, status, want_4xx=True):
    try:
        h_status, h_body = request("GET", "/v1/health", None, auth=False)
        alive = h_status == 200 and json.loads(h_body)["ok"] is True
        same = theta() == expect
    except (OSError, AssertionError, ValueError):
        alive = same = False
    good = status is not None and 400 <= status < 500 if want_4xx else True
    tap(alive and same and good,
        "%s: status %s; the server answers, θ and the version unchanged" % (what, status))


def bad(what, *args, **kw):
    want = kw.pop("want_4xx", True)
    status, _ = request(*args, **kw)
    check(what, status, want)


def rawbad(what, data, want_4xx=False):
    status, _ = send(data)
    check(what, status, want_4xx)


# ---- methods ----
for m in ["DELETE", "PUT", "PATCH", "FOO", "OPTIONS"]:
    bad("method %s on /v1/params" % m, m, "/v1/params", None)
rawbad("method G\\xe9T", b"G\xe9T /v1/health HTTP/1.1\r\nHost: x\r\n\r\n", True)
rawbad("method \\xff\\xfe", b"\xff\xfe /v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
honest_commit()

# ---- paths ----
for p in ["/v1/%ff", "/v1/%00", "/v1/params%00x", "/../../etc/passwd", "/v1/" + "%C3%A9" * 800,
          "/v1/x" + "%C3%A9" * 600, "/" + "a" * 6000, "/v1/params?codec=%ff",
          "/v1/params?codec=" + "z" * 5000, "/v1/params?codec=zlib%00"]:
    bad("GET %s" % p[:40], "GET", p, None, auth=False)
for p in [b"/v1/\xff", b"/v1/\xe9t\xe9", b"/v1/\x01\x02", b"/v1/params?codec=\xff"]:
    rawbad("a raw %r in the path" % p, b"GET " + p + b" HTTP/1.1\r\nHost: x\r\n\r\n", True)
honest_commit()

# ---- framing ----
rawbad("two Content-Length that disagree",
       b"POST /v1/leave HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
       b"Content-Length: 2\r\nContent-Length: 30\r\n\r\n{}", True)
rawbad("Content-Length -1", b"POST /v1/leave HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{}")
rawbad("Content-Length 1e9", b"POST /v1/commit HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
       b"Content-Length: 1000000000\r\n\r\n", True)
rawbad("Content-Length not a number", b"POST /v1/leave HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n")
rawbad("chunked with a bad chunk size", b"POST /v1/commit HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
       b"Transfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")
rawbad("chunked past the cap of join", b"POST /v1/join HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
       b"Transfer-Encoding: chunked\r\n\r\n" + (b"8000\r\n" + b" " * 0x8000 + b"\r\n") * 3 +
       b"0\r\n\r\n", True)
rawbad("a body cut short", b"POST /v1/commit HTTP/1.1\r\nHost: x\r\n" + AUTH.encode() +
       b"Content-Length: 5000\r\n\r\nabc")
rawbad("a header line without a colon", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nnonsense\r\n\r\n")
rawbad("100 kB of headers", b"GET /v1/health HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 100000 + b"\r\n\r\n")
rawbad("HTTP/0.9", b"GET /v1/health\r\n\r\n")
rawbad("binary garbage", bytes(range(256)) * 8)
rawbad("HTTP/7.0", b"GET /v1/health HTTP/7.0\r\nHost: x\r\n\r\n")
bad("a body on GET /v1/health", "GET", "/v1/health", b"x" * 1000, auth=False)
honest_commit()

# ---- auth on every mutating endpoint ----
wrong = ["", "Authorization: Bearer\r\n", "Authorization: Bearer %s\r\n" % TOKEN[:-1],
         "Authorization: Bearer %sx\r\n" % TOKEN, "Authorization: Basic %s\r\n" % TOKEN,
         "Authorization: Bearer \xff\xfe\r\n"]
good_bodies = {"join": b"{}", "leave": b'{"worker": %d}' % W, "checkpoint": b"",
               "stop": b"", "commit": message({"worker": W, "base": expect[0], "seq": 99},
                                               [update([0.5] * N)])}
for route, body in good_bodies.items():
    for i, h in enumerate(wrong):
        st, _ = request("POST", "/v1/" + route, body, headers=h, auth=False)
        check("POST /v1/%s with bad credentials %d" % (route, i), st)
        if st != 401:
            tap(False, "POST /v1/%s with bad credentials %d: 401, got %s" % (route, i, st))

# ---- field types and ranges (with the token) ----
def commit_with(head, blobs=None):
    h = {"worker": W, "base": expect[0], "seq": seq + 1000, "samples": 4}
    h.update(head)
    h = {k: v for k, v in h.items() if v is not None}
    return message(h, blobs or [update([0.25] * N)])


for what, head in [("worker 2^32+W", {"worker": 2**32 + W}), ("worker -1", {"worker": -1}),
                   ("worker \"0\"", {"worker": str(W)}), ("worker 1.5", {"worker": 1.5}),
                   ("worker missing", {"worker": None}), ("base -1", {"base": -1}),
                   ("base 2^64", {"base": 2**64}), ("base \"x\"", {"base": "x"}),
                   ("seq -1", {"seq": -1}), ("seq \"1\"", {"seq": "1"}),
                   ("samples 2^63-1", {"samples": 2**63 - 1}), ("samples -4", {"samples": -4}),
                   ("loss \"x\"", {"loss": "x"}), ("loss 1e300", {"loss": 1e300}),
                   ("idle -1", {"idle": -1}), ("idle \"x\"", {"idle": "x"})]:
    bad("commit with %s" % what, "POST", "/v1/commit", commit_with(head))
for what, body in [("worker 2^32+W", b'{"worker": %d}' % (2**32 + W)), ("worker -1", b'{"worker": -1}'),
                   ("worker \"0\"", b'{"worker": "0"}'), ("done 1", b'{"worker": %d, "done": 1}' % W),
                   ("not JSON", b"{"), ("an array", b"[]"), ("\\xff", b'{"worker": "\xff"}')]:
    bad("leave with %s" % what, "POST", "/v1/leave", body)
for what, body in [("worker 2^32", b'{"worker": 4294967296}'), ("codec 7", b'{"codec": 7}'),
                   ("codec \\xff", b'{"codec": "\xff"}'), ("deep nesting", b"[" * 100000)]:
    bad("join with %s" % what, "POST", "/v1/join", body)
honest_commit()

# ---- NaN, Inf, sizes, blobs ----
for what, vals in [("NaN", [float("nan")] + [0.0] * (N - 1)), ("+Inf", [0.0] * (N - 1) + [float("inf")]),
                   ("-Inf", [float("-inf")] * N)]:
    bad("an update with %s" % what, "POST", "/v1/commit", commit_with({}, [update(vals)]))
bad("an update one float short", "POST", "/v1/commit", commit_with({}, [update([0.0] * (N - 1))]))
bad("an update one float long", "POST", "/v1/commit", commit_with({}, [update([0.0] * (N + 1))]))
meta, data = update([0.0] * N)
meta["count"] = 2**40
bad("a blob claiming 2^40 floats", "POST", "/v1/commit", commit_with({}, [(meta, data)]))
meta, data = update([0.0] * N)
meta["size"] = 2**62
bad("a blob claiming 2^62 bytes", "POST", "/v1/commit", commit_with({}, [(meta, data)]))
bad("two update blobs", "POST", "/v1/commit", commit_with({}, [update([0.0] * N), update([0.0] * N)]))

# ---- zlib bombs ----
bomb = b"\0" * (64 << 20)
meta, data = update(None, "zlib", raw=bomb)
meta["count"] = N
meta["crc32"] = zlib.crc32(bomb[:4 * N])
bad("a zlib bomb (64 MiB of zeros as %d bytes)" % len(data), "POST", "/v1/commit", commit_with({}, [(meta, data)]))
meta, data = update([0.0] * N, "zlib")
data = data[:-4] + zlib.compress(b"\0" * 100000)[2:]
bad("zlib data with more after the stream", "POST", "/v1/commit", commit_with({}, [(meta, data)]))
meta, data = update([1e-3 * (i % 7 + 1) for i in range(N)], "zlib+shuffle")  # not shuffled
bad("zlib+shuffle data that is plain zlib", "POST", "/v1/commit", commit_with({}, [(meta, data)]))
honest_commit()

# ---- floods, bounded ----
socks = [socket.create_connection((HOST, PORT)) for _ in range(600)]
check("600 idle connections open", 200, False)
for s in socks:
    s.close()
socks = []
for _ in range(300):
    s = socket.create_connection((HOST, PORT))
    s.sendall(b"POST /v1/join HTTP/1.1\r\nHost: x\r\n")  # headers never finished
    socks.append(s)
check("300 connections with unfinished headers", 200, False)
honest_commit()
for s in socks:
    s.close()

print("1..%d" % n_test)
sys.exit(1 if failed else 0)
