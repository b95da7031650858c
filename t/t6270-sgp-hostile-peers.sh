#!/bin/bash
# t6270: an SGP node takes only the pushes push-sum can send: from an in-peer of that
# iteration, once per (sender, iteration), a weight within the run's mass, an iteration within
# the window ahead of its own; everything else is refused (409, or 400 for a malformed one),
# counted in node-I.jsonl, and leaves θ as the honest run's, bit for bit. A malformed hello is a
# 400 and stops no node.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup: a run, and free ports for nodes 0 and 1' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 clean &&
	cp -r clean run &&
	ports=$(python3 -c "
import socket
a, b = socket.socket(), socket.socket()
a.bind((\"127.0.0.1\", 0)); b.bind((\"127.0.0.1\", 0))
print(a.getsockname()[1], b.getsockname()[1])") &&
	port0=${ports% *} && port1=${ports#* }
'

# push NODE W ITER...: for each ITER, a push message of tiny.json's size from NODE with weight
# W, every x 0.25, in the file p.ITER (p when there is one ITER)
push() {
	python3 - "$@" <<-\PY
	import json, struct, sys, zlib
	node, w, iters = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
	n = json.loads(open("run/params.gem", "rb").readline())["blobs"][0]["count"]
	raw = struct.pack("<%df" % n, *([0.25] * n))
	for it in iters:
	    head = {"node": node, "iter": int(it), "w": w, "blobs": [{"name": "x", "codec": "raw",
	        "count": n, "size": len(raw), "crc32": zlib.crc32(raw)}]}
	    name = "p" if len(iters) == 1 else "p." + it
	    open(name, "wb").write(json.dumps(head).encode() + b"\n" + raw)
	PY
}

# post PATH FILE: POST FILE to the node at $u, the reply on stdout, its status in code
post() { code=$(curl -s -o reply -w "%{http_code}" -X POST --data-binary "@$2" "$u$1"); cat reply; echo; }

# answered PATH FILE STATUS ERROR: the POST is answered STATUS with that error (ok: 200)
answered() {
	post "$1" "$2" && test "$code" = "$3" &&
	{ test "$4" = ok || grep -q "\"error\": *\"$4\"" reply; }
}

# node I RUNDIR [OPTS]: start SGP node I of 3 in the background (its URL in RUNDIR/node-I.out)
node() {
	_i=$1 _d=$2 && shift 2 &&
	gem-work -q --rule sgp --run "$_d" --node "$_i" --peers-file "$_d/peers" --steps 12 \
		--retry-for 300 "$@" >"$_d/node-$_i.out" 2>"$_d/node-$_i.err" &
}

# node2_first RUNDIR: start node 2, then give it the peer list (nodes 0 and 1 on port0, port1,
# not started); its URL in u, its pid in pid
node2_first() {
	node 2 "$1" && pid=$! && test_bg $pid &&
	wait_for_file "$1/node-2.out" && u=$(cat "$1/node-2.out") &&
	{ echo "http://127.0.0.1:$port0" && echo "http://127.0.0.1:$port1" && echo "$u"; } \
		>"$1/peers.tmp" && mv "$1/peers.tmp" "$1/peers" &&
	wait_until is_ready 10
}

# is_ready: the node at $u has its peer list
is_ready() { curl -sf "$u/v1/health" | grep -q "\"ready\": *true"; }

# the others RUNDIR: start nodes 0 and 1 and wait for all three
the_others() {
	node 0 "$1" --listen 127.0.0.1:$port0 && _p0=$! &&
	node 1 "$1" --listen 127.0.0.1:$port1 && _p1=$! &&
	wait $_p0 && wait $_p1 && wait $pid
}

test_expect_success 'the honest run of 3 nodes' '
	node2_first clean && the_others clean &&
	head -1 clean/node-2.gem | grep -q "\"version\":12,"
'

# With 3 nodes the exponential graph's offsets are 1, 2, 1, 2, ...: node 2 hears from node 1 at
# even iterations and from node 0 at odd ones.
test_expect_success 'node 2 ready, nodes 0 and 1 not started yet' '
	node2_first run
'

test_expect_success 'a malformed hello is a 400 and stops nothing' '
	printf "{\"node\":2}" >h && answered /v1/hello h 400 bad_field &&
	printf "{\"node\":0}" >h && answered /v1/hello h 400 bad_field &&
	printf "{\"node\":0,\"hash\":\"0123\",\"nodes\":3}" >h && answered /v1/hello h 400 bad_field &&
	printf "[1]" >h && answered /v1/hello h 400 bad_json &&
	curl -sf --max-time 10 "$u/v1/health" >/dev/null && kill -0 $pid
'

test_expect_success 'a weight beyond the run'"'"'s mass, or not positive: 400' '
	push 1 1e30 0 && answered /v1/push p 400 bad_field &&
	push 1 3.5 0 && answered /v1/push p 400 bad_field &&
	push 1 0 0 && answered /v1/push p 400 bad_field
'

test_expect_success 'an iteration beyond the window ahead, or past the run: 409' '
	far=$(seq 1000000000002 2 1000000000200) && push 1 0.5 $far &&
	for k in $far; do answered /v1/push p.$k 409 outside_window >/dev/null || return 1; done &&
	push 1 0.5 6 && answered /v1/push p 409 outside_window &&
	push 1 0.5 12 && answered /v1/push p 409 outside_window
'

test_expect_success 'a push from a node that is not an in-peer at that iteration: 409' '
	push 0 0.5 0 && answered /v1/push p 409 not_in_peer &&
	push 1 0.5 1 && answered /v1/push p 409 not_in_peer
'

test_expect_success 'nodes 0 and 1 start: the run ends as the honest one, the refusals logged' '
	the_others run &&
	for i in 0 1 2; do
		tail -c +$(( $(head -1 run/node-$i.gem | wc -c) + 1 )) run/node-$i.gem >a &&
		tail -c +$(( $(head -1 clean/node-$i.gem | wc -c) + 1 )) clean/node-$i.gem >b &&
		cmp a b || return 1
	done &&
	python3 - <<-\PY
	import json
	n = {}
	for l in open("run/node-2.jsonl"):
	    e = json.loads(l)
	    if e.get("event") == "refused":
	        n[e["reason"]] = n.get(e["reason"], 0) + e["count"]
	assert n == {"bad_request": 7, "outside_window": 102, "not_in_peer": 2}, n
	PY
'

test_expect_success 'a second push for the same (sender, iteration): 409, the first one taken' '
	cp -r clean dup && rm -f dup/peers dup/node-* &&
	node2_first dup &&
	push 1 0.5 0 && answered /v1/push p 200 ok &&
	answered /v1/push p 409 duplicate_push &&
	push 0 0.5 1 && answered /v1/push p 200 ok &&
	answered /v1/push p 409 duplicate_push &&
	push 1 0.5 0 && answered /v1/push p 409 duplicate_push &&
	kill $pid && { wait $pid; test $? = 143; }
'

test_done
