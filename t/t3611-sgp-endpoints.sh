#!/bin/bash
# t3611: an SGP node's own endpoints refuse what does not name a peer: POST /v1/bye with {},
# garbage, its own index or a string is a 400 with a JSON error (it was taken as "node 0 said
# bye"); a well-formed push that comes before the node has its peer list is a 503 to retry
# (h_push read the node's id and size before the lock, and refused it as a bad field).
. "$GEM_SRC/t/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run0
'

# push_msg NODE: a well-formed push message of 4 floats from NODE on stdout
push_msg() {
	python3 -c "
import json, struct, sys, zlib
raw = struct.pack(\"<4f\", 0.5, 0.5, 0.5, 0.5)
head = {\"node\": $1, \"iter\": 0, \"w\": 0.5, \"blobs\": [{\"name\": \"x\", \"codec\": \"raw\",
	\"count\": 4, \"size\": len(raw), \"crc32\": zlib.crc32(raw)}]}
sys.stdout.buffer.write(json.dumps(head).encode() + b\"\n\" + raw)"
}

# post PATH BODY_FILE: POST to the node, the body of the reply on stdout, its status in code
post() { code=$(curl -s -o reply -w "%{http_code}" -X POST --data-binary "@$2" "$u$1"); cat reply; }

test_expect_success 'a node without its peer list: a push is 503 (retry), not a bad field' '
	gem-work -q --rule sgp --run run0 --node 1 --peers-file run0/peers --retry-for 30 \
		>run0/node.url 2>run0/node.err &
	pid=$! && test_bg $pid &&
	wait_for_file run0/node.url &&
	u=$(cat run0/node.url) &&
	push_msg 0 >push &&
	post /v1/push push && echo " $code" &&
	test "$code" = 503 && grep -q "\"not_ready\"" reply
'

# wait_ready: wait until the node says it has its peer list
wait_ready() {
	for _i in $(seq 100); do
		curl -sf "$u/v1/health" | grep -q "\"ready\": *true" && return 0
		sleep 0.1
	done
	return 1
}

# bye_refused BODY...: each POST /v1/bye BODY is a 400 bad_field with a JSON error
bye_refused() {
	for _b in "$@"; do
		printf "%s" "$_b" >bye && post /v1/bye bye && echo " $code ($_b)" &&
			test "$code" = 400 && grep -q "\"error\": *\"bad_field\"" reply || return 1
	done
}

test_expect_success 'once ready, POST /v1/bye refuses what names no other node' '
	{ echo http://127.0.0.1:9 && echo "$u"; } >run0/peers.tmp && mv run0/peers.tmp run0/peers &&
	wait_ready &&
	bye_refused "{}" "x" "[]" "{\"node\":1}" "{\"node\":2}" "{\"node\":-1}" "{\"node\":\"0\"}" \
		"{\"node\":null}" "{\"node\":0.5}" &&
	printf "{\"node\":0}" >bye && post /v1/bye bye && echo " $code" && test "$code" = 200 &&
	grep -q "\"ok\": *true" reply
'

test_expect_success 'the node is still waiting for node 0, and stops on SIGTERM' '
	kill -0 $pid && kill $pid && { wait $pid; test $? = 143; } &&
	cat run0/node.err
'

test_done
