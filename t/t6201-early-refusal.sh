#!/bin/bash
# t6201: a body over its route's cap (413, refused before it is read) reaches a client that
# sends its whole body before it reads (no "Expect: 100-continue", as gem's own client) as that
# answer, not as a connection reset: the server reads and drops the body (up to 64 MiB) before
# it answers, and the connection goes on.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup: a server behind a token' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run &&
	echo secret >token &&
	start_server run --token-file token --keep-running
'

# answers N PATH [HEADER]: the statuses a client reads after it has sent a 30 MB body to PATH
# (its whole body, then the reply), N times; 000 when it read no reply (a reset).
answers() {
	python3 - "${URL##*:}" "$@" <<-\EOF
	import socket, sys
	port, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
	extra = "".join(h + "\r\n" for h in sys.argv[4:])
	body = bytes(30_000_000)
	out = []
	for _ in range(n):
	    s = socket.create_connection(("127.0.0.1", port), timeout=30)
	    head = "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n" % (path, extra, len(body))
	    try:
	        s.sendall(head.encode() + body)
	        reply = s.recv(4096)
	    except OSError:
	        reply = b""
	    s.close()
	    out.append(reply.split(b" ")[1].decode() if reply.startswith(b"HTTP/1.1 ") else "000")
	print(" ".join(out))
	EOF
}

test_expect_success 'a 30 MB body on join (its cap: 64 KiB): 413, no reset' '
	got=$(answers 5 /v1/join "Authorization: Bearer secret") && echo "$got" &&
	test "$got" = "413 413 413 413 413"
'

test_expect_success 'a 30 MB body on leave: 413, and the server answers on' '
	got=$(answers 2 /v1/leave "Authorization: Bearer secret") && echo "$got" && test "$got" = "413 413" &&
	curl -sf "$URL/v1/health" | grep -q "\"ok\""
'

test_done
