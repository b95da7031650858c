#!/bin/bash
# t6290: a worker cannot be given the wrong slice of θ. Every reply of a slice's server names
# its slice, and the worker checks it on every reply: two proxies that answer GET /v1/health as
# their own slice but pass everything else to the other one (tiny.json has an even number of
# parameters, so both slices have one length) stop the worker before either slice moves. One
# slice's URL alone is refused with the number of URLs to give.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup: a run served by 2 slices' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 4 --workers 1 run &&
	for i in 0 1; do
		{ gem-serve --listen 127.0.0.1:0 --slice $i/2 --keep-running run >s$i.out 2>s$i.err & } &&
		test_bg $! || return 1
	done &&
	wait_for_file run/slice-0-of-2/server.url && wait_for_file run/slice-1-of-2/server.url &&
	u0=$(cat run/slice-0-of-2/server.url) && u1=$(cat run/slice-1-of-2/server.url) &&
	curl -sf "$u0/v1/health" | grep -q "\"theta_slice\": *\[0, *2, *0, *554\]" &&
	curl -sf "$u1/v1/health" | grep -q "\"theta_slice\": *\[1, *2, *554, *554\]" &&
	curl -sf "$u1/v1/params" | head -1 | grep -q "\"theta_slice\":\[1,2,554,554\]"
'

test_expect_success 'one slice'"'"'s URL alone: refused, saying to give both' '
	{ gem-work -q --server "$u0" --steps 2 --retry-for 5 2>err; test $? = 1; } &&
	cat err &&
	grep -q "serves slice 0/2 of a sliced run: give all 2 URLs" err
'

test_expect_success 'proxies that swap the slices after the health check: the worker stops' '
	cat >swap.py <<-\PY &&
	import http.server, sys, urllib.request, urllib.error
	own, other = sys.argv[1], sys.argv[2]
	class H(http.server.BaseHTTPRequestHandler):
	    protocol_version = "HTTP/1.1"
	    def log_message(self, *a):
	        pass
	    def relay(self, method):
	        to = own if self.path.startswith("/v1/health") else other
	        n = int(self.headers.get("Content-Length") or 0)
	        body = self.rfile.read(n) if n else None
	        req = urllib.request.Request(to + self.path, data=body, method=method)
	        for h in ("Content-Type", "Authorization"):
	            if self.headers.get(h):
	                req.add_header(h, self.headers[h])
	        try:
	            r = urllib.request.urlopen(req, timeout=30)
	        except urllib.error.HTTPError as e:
	            r = e
	        data = r.read()
	        self.send_response(r.status if hasattr(r, "status") else r.code)
	        self.send_header("Content-Type", r.headers.get("Content-Type", "application/json"))
	        self.send_header("Content-Length", str(len(data)))
	        self.end_headers()
	        self.wfile.write(data)
	    def do_GET(self):
	        self.relay("GET")
	    def do_POST(self):
	        self.relay("POST")
	s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
	print(s.server_address[1], flush=True)
	s.serve_forever()
	PY
	{ python3 -u swap.py "$u0" "$u1" >p0.out 2>p0.err & } && test_bg $! &&
	{ python3 -u swap.py "$u1" "$u0" >p1.out 2>p1.err & } && test_bg $! &&
	wait_until "test -s p0.out && test -s p1.out" &&
	p0=http://127.0.0.1:$(cat p0.out) p1=http://127.0.0.1:$(cat p1.out) &&
	{ gem-work -q --server "$p0,$p1" --steps 4 --retry-for 5 2>err; test $? = 1; } &&
	cat err &&
	grep -q "serves slice 1/2 of θ (offset 554, length 554), not 0/2 (offset 0, length 554)" err &&
	for u in "$u0" "$u1"; do
		curl -sf "$u/v1/health" | grep -q "\"version\": *0," || return 1
	done
'

test_expect_success 'given in order, the same worker trains both slices' '
	gem-work -q --server "$u0,$u1" --steps 4 --retry-for 5 &&
	for u in "$u0" "$u1"; do
		curl -sf "$u/v1/health" | grep -q "\"version\": *4," || return 1
	done &&
	for u in "$u0" "$u1"; do curl -sf -X POST "$u/v1/stop" >/dev/null || return 1; done
'

test_done
