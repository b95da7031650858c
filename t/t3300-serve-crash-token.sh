#!/bin/bash
# t3300: kill -9 of the server mid-run and a restart on the same port: the run resumes from
# the checkpoint and the worker carries on. A run with a token refuses commits without it.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 2 run
'

test_expect_success 'a server checkpointing often, and a slow worker' '
	start_server run --checkpoint-every 0.2 &&
	port=${URL##*:}
'
gem-work -q --server "$URL" --steps 400 --retry-for 30 --slowdown 200 2>worker.err &
worker=$!
test_bg $worker

# saved_version FILE: the version in a checkpoint file's header line
saved_version() {
	head -1 "$1" | sed -n 's/.*"version":\([0-9]*\).*/\1/p'
}

test_expect_success 'kill -9 of the server mid-run leaves a consistent checkpoint' '
	wait_until "[ \"\$(health_version)\" -ge 60 ] 2>/dev/null" 20 &&
	# a checkpoint past version 0 (one every 0.2 s) is on disk
	wait_until "[ \"\$(saved_version run/params.gem)\" -ge 1 ] 2>/dev/null" 20 &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	saved=$(head -1 run/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	echo "checkpoint at $saved" && test "$saved" -ge 1 && test "$saved" -lt 400 &&
	# θ'"'"'s state: rule-state.gem, of θ'"'"'s version or, when the kill fell between it and
	# params.gem, newer (its own θ is resumed then)
	state=$(head -1 run/rule-state.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	test "$state" -ge "$saved"
'

test_expect_success 'restarted on the same port, the run goes on and the worker finishes' '
	# not a wait for a state: the server stays down a second, which the worker retries through
	sleep 1 &&
	{ gem-serve --listen 127.0.0.1:$port --checkpoint-every 0.2 run >/dev/null 2>serve2.err &
	  SERVER_PID=$!; } &&
	test_bg $SERVER_PID &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	wait $worker &&
	for i in $(seq 50); do kill -0 $SERVER_PID 2>/dev/null || break; sleep 0.1; done &&
	wait_exit $SERVER_PID &&
	final=$(head -1 run/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	echo "final $final" && test "$final" -gt "$saved" &&
	grep -q "resumed" serve2.err &&
	gem-eval run | awk "NR==2 { exit !(\$5 > 0.5) }"
'

# A kill between a checkpoint's two files (rule-state.gem, which holds θ with its state, then
# params.gem), even twice in a row: the restarted server resumes rule-state.gem's θ, version and
# state. (When the state came first alone, the first restart took the save before's θ and
# state, and the second found no state of θ's version and dropped it.)
test_expect_success 'kills between a checkpoint'"'"'s two files lose neither θ nor its state' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 5 pair &&
	start_server pair --keep-running --checkpoint-every 0 &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 10 &&
	curl -sf -X POST "$URL/v1/checkpoint" >/dev/null &&
	cp pair/params.gem p10 &&
	gem-work -q --server "$URL" --steps 5 &&
	stop_server &&
	cp p10 pair/params.gem &&
	start_server pair --keep-running --checkpoint-every 0 &&
	grep -q "resumed the rule'"'"'s state and 2 workers" pair/serve.err &&
	test "$(health_version)" = 15 &&
	gem-work -q --server "$URL" --steps 3 &&
	stop_server &&
	head -1 pair/rule-state.gem | grep -q "\"version\":18," &&
	cp p10 pair/params.gem &&
	start_server pair --keep-running &&
	grep -q "resumed the rule'"'"'s state and 3 workers" pair/serve.err &&
	! grep -q "afresh" pair/serve.err &&
	test "$(health_version)" = 18 &&
	stop_server &&
	head -1 pair/params.gem | grep -q "\"version\":18,"
'

test_expect_success 'a run with a token refuses a commit without it' '
	echo "s3cret-token" >token &&
	start_server run --token-file token --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	test "$(curl -s -o /dev/null -w "%{http_code}" -X POST -d "{}" "$URL/v1/join")" = 401 &&
	test "$(curl -s -o /dev/null -w "%{http_code}" -X POST -H "Authorization: Bearer wrong" -d "{}" "$URL/v1/join")" = 401 &&
	test "$(curl -s -o /dev/null -w "%{http_code}" -X POST --data-binary x "$URL/v1/commit")" = 401 &&
	! gem-work -q --server "$URL" --steps 2 --retry-for 1 2>err && grep -q -i "unauthori" err &&
	gem-work -q --server "$URL" --steps 2 --token-file token &&
	curl -sf "$URL/v1/health" >/dev/null &&
	TOKEN=s3cret-token stop_server
'
test_done
