#!/bin/bash
# t6200: requests no honest client sends do not bring gem-serve down: bytes that are not UTF-8
# in a path or a method, bodies on GET and past a route's small cap, conflicting
# Content-Length, transfer codings but chunked, headers past 16 KiB, a garbage request line, a
# flood of idle connections; ?codec= with + and %ff; worker buffers freed on
# leave and --max-workers; --public without a token.
. "$(dirname "$0")/test-lib.sh"

# raw PORT BYTES: send BYTES (a Python bytes literal) on one connection, print the status line.
raw() {
	python3 - "$1" "$2" <<-\EOF
	import ast, socket, sys
	s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
	s.sendall(ast.literal_eval(sys.argv[2]))
	out = b""
	while True:
	    d = s.recv(65536)
	    if not d:
	        break
	    out += d
	print(out.split(b"\r\n")[0].decode("latin-1"))
	body = out.split(b"\r\n\r\n", 1)[-1]
	sys.stdout.write(body.decode("latin-1"))
	EOF
}
health() { curl -sf -m 10 "$URL/v1/health" | grep -q '"ok":true'; }
# serve: a server on run, started again if an earlier test killed it (so that each test fails
# on its own against a server that has the bug).
serve() {
	{ test -n "${SERVER_PID:-}" && kill -0 "$SERVER_PID" 2>/dev/null; } ||
	{ start_server run --keep-running && PORT=${URL##*:}; }
}

test_expect_success 'setup: a server' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run &&
	serve
'

test_expect_success '/v1/%ff: 404 with the byte escaped, the server lives' '
	serve &&
	test "$(curl -s -o reply.json -w "%{http_code}" "$URL/v1/%ff")" = 404 &&
	grep -F "no resource at /v1/\\\\xff" reply.json &&
	health
'
test_expect_success 'a raw 0xff and 0xe9 in the path: 404' '
	serve &&
	raw $PORT "b\"GET /v1/\\xff\\xe9 HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\"" >out &&
	head -1 out | grep "404" && python3 -c "import json,sys; json.loads(open(\"out\").read().split(\"\\n\",1)[1])" &&
	health
'
test_expect_success 'G\xe9T /v1/health: 405' '
	serve &&
	raw $PORT "b\"G\\xe9T /v1/health HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n\"" >out &&
	head -1 out | grep "405" && grep -F "G\\\\xe9T" out &&
	health
'
test_expect_success 'a long UTF-8 path, its detail cut past 1 KiB: 404' '
	serve &&
	p=x$(python3 -c "print(\"%C3%A9\" * 700)") &&
	test "$(curl -s -o reply.json -w "%{http_code}" "$URL/v1/$p")" = 404 &&
	python3 -c "import json; json.load(open(\"reply.json\"))" &&
	health
'
test_expect_success '/v1/params%00x: 404, not /v1/params' '
	serve &&
	test "$(curl -s -o reply.json -w "%{http_code}" "$URL/v1/params%00x")" = 404 &&
	test "$(curl -s -o reply.json -w "%{http_code}" "$URL/v1/params?codec=raw%00")" = 400
'
test_expect_success 'a body on a GET: 413, not buffered' '
	serve &&
	test "$(curl -s -o reply.json -w "%{http_code}" -X GET --data-binary "xyz" "$URL/v1/health")" = 413 &&
	grep too_large reply.json && health
'
test_expect_success 'a body of 68 kB (over 64 KiB, under an update) on join, leave, stop, checkpoint: 413 before it is sent (Expect: 100-continue)' '
	serve &&
	for r in join leave stop checkpoint; do
		raw $PORT "b\"POST /v1/$r HTTP/1.1\\r\\nHost: x\\r\\nExpect: 100-continue\\r\\nContent-Length: 68000\\r\\n\\r\\n\"" >out &&
		head -1 out | grep 413 || return 1
	done &&
	health
'
test_expect_success 'two Content-Length headers that disagree: 400' '
	serve &&
	raw $PORT "b\"POST /v1/leave HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 2\\r\\nContent-Length: 40\\r\\nConnection: close\\r\\n\\r\\n{}\"" >out &&
	head -1 out | grep 400 && grep bad_request out && health
'
test_expect_success 'a transfer coding other than chunked alone: 501 at once' '
	serve &&
	for te in "chunked, identity" gzip; do
		raw $PORT "b\"POST /v1/join HTTP/1.1\\r\\nHost: x\\r\\nTransfer-Encoding: $te\\r\\n\\r\\n2\\r\\n{}\\r\\n0\\r\\n\\r\\n\"" >out &&
		head -1 out | grep 501 && grep not_implemented out || return 1
	done &&
	health
'
test_expect_success 'headers over 16 KiB: 431; a garbage request line: closed, no answer' '
	serve &&
	big=$(python3 -c "print(\"a\" * 65536)") && fit=${big:0:8192} &&
	raw $PORT "b\"GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\nX-Big: $big\\r\\nConnection: close\\r\\n\\r\\n\"" >out &&
	head -1 out | grep 431 && grep headers_too_large out &&
	raw $PORT "b\"GET /v1/health HTTP/1.1\\r\\nHost: x\\r\\nX-Fit: $fit\\r\\nConnection: close\\r\\n\\r\\n\"" >out &&
	head -1 out | grep 200 &&
	raw $PORT "b\"HELLO\\r\\n\\r\\n\"" >out && test "$(cat out)" = "" &&
	health
'
test_expect_success '?codec=zlib+shuffle means zlib+shuffle, as %2B does' '
	serve &&
	curl -sf "$URL/v1/params?codec=zlib+shuffle" | head -1 | grep -F "\"codec\":\"zlib+shuffle\"" &&
	curl -sf "$URL/v1/params?codec=zlib%2Bshuffle" | head -1 | grep -F "\"codec\":\"zlib+shuffle\""
'
test_expect_success '?codec=%ff: 400' '
	serve &&
	test "$(curl -s -o reply.json -w "%{http_code}" "$URL/v1/params?codec=%ff")" = 400 &&
	grep bad_codec reply.json
'
test_expect_success '600 idle connections do not lock a worker out' '
	serve &&
	python3 - $PORT "$URL" <<-\EOF
	import socket, subprocess, sys
	port, url = int(sys.argv[1]), sys.argv[2]
	socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(600)]
	for u in ["/v1/health", "/v1/run"]:
	    r = subprocess.run(["curl", "-sf", "-m", "20", url + u], capture_output=True)
	    assert r.returncode == 0, (u, r)
	r = subprocess.run(["curl", "-sf", "-m", "20", "-X", "POST", "-d", "{}", url + "/v1/join"],
	                   capture_output=True)
	assert r.returncode == 0 and r.stdout.startswith(b"{\"worker\":"), r
	for s in socks:
	    s.close()
	EOF
'
test_expect_success 'a worker that leaves gives its buffers back: --max-workers 2 serves joins forever' '
	serve && stop_server &&
	start_server run --keep-running --max-workers 2 &&
	for i in 1 2 3 4 5; do
		curl -sf -X POST -d "{}" "$URL/v1/join" | head -1 >j &&
		w=$(python3 -c "import json; print(json.load(open(\"j\"))[\"worker\"])") &&
		curl -sf -X POST -d "{\"worker\": $w}" "$URL/v1/leave" || return 1
	done &&
	curl -sf -X POST -d "{}" "$URL/v1/join" >/dev/null &&
	curl -sf -X POST -d "{}" "$URL/v1/join" >/dev/null &&
	test "$(curl -s -o reply.json -w "%{http_code}" -X POST -d "{}" "$URL/v1/join")" = 503 &&
	grep -- --max-workers reply.json &&
	stop_server
'
test_expect_code 2 '--public without a token is refused' 'gem-serve --listen 0.0.0.0:0 --public run'
test_expect_code 2 '--no-token with --token-file is refused' '
	echo secret >tok && gem-serve --no-token --token-file tok run'
test_expect_code 2 'an SGP node with --public and no token is refused' '
	gem-work --rule sgp --run run --peers http://127.0.0.1:1 --listen 0.0.0.0:0 --public'
test_expect_success '--public --no-token serves' '
	start_server run --public --no-token && health && stop_server
'
test_done
