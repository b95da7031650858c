#!/bin/bash
# t3109: the copy of θ after a worker leaves and rejoins, and after the server restarts from its
# checkpoint (wire/delta): the first reply then is θ whole in fp16, the next ones deltas again,
# and the worker's copy is the server's bit for bit afterwards (the CRC-32 of both, compared at
# every reply and at the end). A first reply that were a delta would be refused by a new
# worker, and counted among the deltas of one that rejoins.
. "$(dirname "$0")/test-lib.sh"

msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 --value 0.001 "$@"; }
# reply FILE: the blob's name and codec
reply() {
	head -1 "$1" | python3 -c 'import json, sys; b = json.load(sys.stdin)["blobs"][0]
print(b["name"], b["codec"])'
}
# join [WORKER]: join in int8 (again, as WORKER) into join.msg; its blob's name and codec in r
join() {
	curl -sf -X POST -d "{\"codec\":\"int8\"${1:+,\"worker\":$1}}" "$URL/v1/join" >join.msg &&
	reply join.msg >r && cat r
}
# commit SEQ: worker 0's commit SEQ in int8 into c.msg; its blob's name and codec in r
commit() {
	msg --worker 0 --seq "$1" --codec int8 >m &&
	curl -sf -o c.msg -X POST --data-binary @m "$URL/v1/commit" && reply c.msg >r && cat r
}
# the debug line of a worker that leaves: "REPLIES CRC CRC" when its copy's CRC-32 is the
# server's last
copy_line() {
	sed -n "s/.*slice 0: \([0-9]*\) replies as deltas; the copy's CRC-32 \([0-9a-f]*\), the server's last \2$/\1 \2/p" "$1"
}

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 srv &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run
'

test_expect_success 'a rejoin under the same id gets θ whole, then deltas again' '
	start_server srv --keep-running --worker-timeout 0 &&
	join && grep -q "^params fp16$" r &&
	commit 1 && grep -q "^delta int8$" r &&
	commit 2 && grep -q "^delta int8$" r &&
	join 0 && grep -q "^params fp16$" r &&
	commit 3 && grep -q "^delta int8$" r
'

test_expect_success 'after a restart from the checkpoint, θ whole again, then deltas' '
	curl -sf -X POST -d "{}" "$URL/v1/checkpoint" >/dev/null &&
	port=${URL##*:} &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	{ gem-serve --listen 127.0.0.1:$port --keep-running --worker-timeout 0 srv >/dev/null \
		2>serve2.err & SERVER_PID=$!; } &&
	test_bg $SERVER_PID &&
	wait_until "curl -sf $URL/v1/health >/dev/null" 20 &&
	join 0 && grep -q "^params fp16$" r &&
	commit 4 && grep -q "^delta int8$" r &&
	stop_if_running $SERVER_PID
'

test_expect_success 'gem-work leaves and rejoins: its new copy is the server'"'"'s after every reply' '
	start_server run --keep-running --worker-timeout 0 &&
	GEM_LOG=debug gem-work --server "$URL" --steps 40 --codec int8 2>work1.err &&
	copy_line work1.err >c1 && cat c1 && test "$(cut -d" " -f1 c1)" = 40 &&
	GEM_LOG=debug gem-work --server "$URL" --worker-id 0 --steps 40 --codec int8 2>work2.err &&
	copy_line work2.err >c2 && cat c2 && test "$(cut -d" " -f1 c2)" = 40 &&
	! grep -q "not the server" work1.err work2.err
'

test_expect_success 'a server restarted from its checkpoint under a running gem-work: the worker rejoins, its copy the server'"'"'s' '
	port=${URL##*:} && v0=$(health_version) &&
	{ GEM_LOG=debug gem-work --server "$URL" --worker-id 0 --steps 200 --codec int8 \
		--retry-for 30 --slowdown 200 2>work3.err & worker=$!; } &&
	test_bg $worker &&
	wait_until "[ \"\$(health_version)\" -ge $((v0 + 40)) ] 2>/dev/null" 30 &&
	curl -sf -X POST -d "{}" "$URL/v1/checkpoint" >/dev/null &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	{ gem-serve --listen 127.0.0.1:$port --worker-timeout 0 run >/dev/null 2>serve3.err &
	  SERVER_PID=$!; } &&
	test_bg $SERVER_PID &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	wait $worker && cat work3.err | tail -5 &&
	joins=$(grep -c "joining again" work3.err) && test "$joins" -ge 1 &&
	# each commit refused was followed by a join whose reply was θ whole: every other reply a
	# delta (a delta for the join would make it 200)
	copy_line work3.err >c3 && cat c3 && test "$(( $(cut -d" " -f1 c3) + joins ))" = 200 &&
	! grep -q "not the server" work3.err
'
test_done
