#!/bin/bash
# t3108: gem-serve counts the memory of its rule's state and of its workers' buffers, in
# GET /v1/health and its summary line (GEM: m_w and s_w, 2·4·|θ| bytes a worker; a worker of
# int8 a copy of θ more); --max-memory refuses with a 503 and a message the join that would pass
# it, and a worker so refused fails with that message, while a worker whose state the server
# keeps joins again.
. "$(dirname "$0")/test-lib.sh"

init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 "$@"; }
# mem FIELD: that field of GET /v1/health's "memory"; "fixed", its total without the request
# bodies the connections hold (which are there or not as connections come and go), checked to be
# the sum of the others
mem() {
	curl -sf "$URL/v1/health" | python3 -c "
import json, sys
m = json.load(sys.stdin)[\"memory\"]
assert m[\"rule\"] + m[\"copies\"] + m[\"buffers\"] + m[\"bodies\"] == m[\"total\"], m
m[\"fixed\"] = m[\"total\"] - m[\"bodies\"]
print(m[\"$1\"])"
}
# slow_commit BYTES SECONDS: a POST /v1/commit that sends BYTES of a longer body, then waits (run
# in the background, it is the process of $!)
slow_commit() {
	exec python3 -c "
import socket, sys, time, urllib.parse
u = urllib.parse.urlparse(sys.argv[1])
s = socket.create_connection((u.hostname, u.port))
s.sendall(b\"POST /v1/commit HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/octet-stream\\r\\n\"
          b\"Content-Length: %d\\r\\n\\r\\n\" % (int(sys.argv[2]) + 1000))
s.sendall(b\"x\" * int(sys.argv[2]))
time.sleep(float(sys.argv[3]))" "$URL" "$1" "$2"
}
join() { curl -s -o "$1" -w "%{http_code}" -X POST -d "$2" "$URL/v1/join"; }

# tiny's θ is 1,108 floats: 4,432 bytes
test_expect_success 'setup' '
	make_tiny_data data && init run
'

test_expect_success 'a GEM worker adds m_w and s_w to the rule state, an int8 one a copy of θ' '
	start_server run --keep-running --worker-timeout 0 &&
	r0=$(mem rule) && c0=$(mem copies) && echo "rule $r0, copies $c0" &&
	test $(join j0 "{\"codec\":\"raw\"}") = 200 &&
	r1=$(mem rule) && test $((r1 - r0)) = 8864 && test $(mem copies) = $c0 &&
	test $(join j1 "{\"codec\":\"int8\"}") = 200 &&
	r2=$(mem rule) && test $((r2 - r1)) = 8864 && test $(($(mem copies) - c0)) = 4432 &&
	test $(mem bodies) -ge 4096 && test $(mem max) = 0
'

test_expect_success 'the summary line gives the state and its peak' '
	stop_server && cat run/serve.err &&
	grep -q "rule state [0-9.]* KiB, [0-9.]* KiB with copies and buffers (peak [0-9.]* KiB)" run/serve.err
'

# at the start 5 vectors of θ (θ, a commit's spare, m_w'"'"'s spare, 2 of scratch): 22,160
# bytes; each raw worker 8,864 of rule state and 8,528 of reply buffer (4,096 + θ), and its
# connection room for the body of an uncompressed commit (16,384, a power of two): a join
# needs 33,776
test_expect_success '--max-memory: the join past it gets a 503 that says why' '
	init cap && start_server cap --keep-running --worker-timeout 0 --max-memory 88000 &&
	test $(mem fixed) = 22160 &&
	test $(join a "{\"codec\":\"raw\"}") = 200 && test $(join b "{\"codec\":\"raw\"}") = 200 &&
	test $(mem rule) = 39888 && fixed=$(mem fixed) && echo "without bodies $fixed" &&
	test $fixed -gt $((39888 + 2 * 8528)) && test $((fixed + 33776)) -gt 88000 && test $(mem max) = 88000 &&
	test $(join c "{\"codec\":\"raw\"}") = 503 && cat c && echo &&
	grep -q "\"full\"" c &&
	grep -q "joining a new worker needs 33.0 KiB more of rule state; the server'"'"'s --max-memory is 85.9 KiB ([0-9.]* KiB in use)" c &&
	test $(mem fixed) = $fixed
'

test_expect_success 'a worker whose state the server keeps joins again' '
	test $(join again "{\"worker\":0,\"codec\":\"raw\"}") = 200
'

test_expect_success 'a worker refused for memory fails with the message, exit 1' '
	{ gem-work --server "$URL" --steps 5 --retry-for 0.5 2>work.err; echo $? >rc; } &&
	test $(cat rc) = 1 &&
	cat work.err &&
	grep -q "more of rule state; the server'"'"'s --max-memory is 85.9 KiB" work.err
'

test_expect_success 'a worker that leaves makes room for another' '
	curl -sf -X POST -d "{\"worker\":1}" "$URL/v1/leave" >/dev/null &&
	test $(join d "{\"codec\":\"raw\"}") = 200
'

test_expect_success 'a request body coming in counts, and refuses the join it leaves no room for' '
	stop_server && init bodies &&
	start_server bodies --keep-running --worker-timeout 0 --max-memory 70000 &&
	{ slow_commit 60000 60 & } && slow=$! &&
	for i in $(seq 100); do test $(mem bodies) -ge 60000 && break; sleep 0.1; done &&
	test $(mem bodies) -ge 60000 && test $(mem total) -gt 70000 &&
	test $(join e "{\"codec\":\"raw\"}") = 503 && cat e && echo &&
	grep -q "more of rule state; the server'"'"'s --max-memory is 68.4 KiB" e &&
	kill $slow &&
	for i in $(seq 100); do test $(mem bodies) -lt 60000 && break; sleep 0.1; done &&
	test $(join f "{\"codec\":\"raw\"}") = 200
'

test_expect_success 'a restart whose checkpoint holds more workers'"'"' state than --max-memory: refused, exit 2' '
	stop_server && init resumed && start_server resumed --keep-running --worker-timeout 0 &&
	for w in g h i; do test $(join $w "{\"codec\":\"raw\"}") = 200 || return 1; done &&
	stop_server && test -s resumed/rule-state.gem &&
	{ gem-serve --listen 127.0.0.1:0 --max-memory 40000 resumed 2>err; echo $? >rc; } &&
	cat err && test $(cat rc) = 2 &&
	grep -q "the run'"'"'s state takes 47.6 KiB (47.6 KiB of rule state, its checkpoint'"'"'s workers'"'"' with it), past --max-memory 39.1 KiB" err &&
	! test -e resumed/server.url &&
	start_server resumed --keep-running --max-memory 60000 &&
	test $(mem rule) = 48752 && stop_server
'

test_expect_success '--max-memory takes sizes with suffixes, and refuses others' '
	gem-serve --check --max-memory 512M &&
	gem-serve --check --max-memory 2GiB &&
	gem-serve --check --max-memory 65536 &&
	for bad in 0 12X -1 1.5G 99999999999T ""; do
		{ gem-serve --check --max-memory "$bad" 2>err; echo $? >rc; } && cat err &&
		test $(cat rc) = 2 &&
		grep -q "^gem-serve: --max-memory: not a size" err || return 1
	done
'
test_done
