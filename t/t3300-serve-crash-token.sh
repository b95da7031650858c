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

test_expect_success 'kill -9 of the server mid-run leaves a consistent checkpoint' '
	wait_until "[ \"\$(health_version)\" -ge 60 ] 2>/dev/null" 20 &&
	sleep 0.5 &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	saved=$(head -1 run/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	echo "checkpoint at $saved" && test "$saved" -ge 1 && test "$saved" -lt 400 &&
	# the state of θ'"'"'s version: the last save'"'"'s, or, when the kill fell while a checkpoint was
	# being written (its state first, then θ), the save before'"'"'s
	head -1 run/rule-state.gem run/rule-state.prev.gem 2>/dev/null | grep -q "\"version\":$saved,"
'

test_expect_success 'restarted on the same port, the run goes on and the worker finishes' '
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

# A crash after a checkpoint's rule state and before its θ: θ is the save before's, and so is
# the state the restarted server takes (rule-state.prev.gem), with its workers.
test_expect_success 'a crash between a checkpoint'"'"'s two files resumes the state of the save before' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 5 pair &&
	start_server pair --keep-running --checkpoint-every 0 &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 10 &&
	curl -sf -X POST "$URL/v1/checkpoint" >/dev/null &&
	cp pair/params.gem p10 && head -1 pair/rule-state.gem | grep -q "\"version\":10," &&
	gem-work -q --server "$URL" --steps 5 &&
	stop_server &&
	head -1 pair/rule-state.gem | grep -q "\"version\":15," &&
	head -1 pair/rule-state.prev.gem | grep -q "\"version\":10," &&
	cp p10 pair/params.gem &&
	start_server pair --keep-running &&
	grep -q "resumed the rule'"'"'s state and 1 worker" pair/serve.err &&
	! grep -q "afresh" pair/serve.err &&
	stop_server &&
	head -1 pair/rule-state.gem | grep -q "\"version\":10,"
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
