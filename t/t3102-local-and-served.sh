#!/bin/bash
# t3102: a run trained locally can then be served, and the other way round: the local
# optimiser's state and the server's rule state are two files, neither spoils the other.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run
'

test_expect_success 'local training, then a server on the same run' '
	gem-work -q --local run --steps 20 &&
	test -f run/local-state.gem &&
	start_server run &&
	gem-work -q --server "$URL" --steps 10 &&
	wait_exit $SERVER_PID &&
	test -f run/rule-state.gem &&
	head -1 run/params.gem | grep -q "\"version\":30"
'

test_expect_success 'then local training again: the server'"'"'s state is left as it was' '
	cp run/rule-state.gem before.gem &&
	gem-work -q --local run --steps 5 &&
	cmp before.gem run/rule-state.gem &&
	head -1 run/params.gem | grep -q "\"version\":35"
'

test_expect_success 'and a server again, its rule state of another version dropped with a word' '
	start_server run &&
	gem-work -q --server "$URL" --steps 3 &&
	wait_exit $SERVER_PID &&
	grep -q "starts afresh" run/serve.err &&
	head -1 run/params.gem | grep -q "\"version\":38"
'
test_expect_success 'SIGHUP (a closed terminal) stops gem-serve as TERM does: checkpoint, 129' '
	start_server run --keep-running &&
	gem-work -q --server "$URL" --steps 2 --worker-id 7 &&
	kill -HUP $SERVER_PID &&
	{ wait_exit $SERVER_PID; rc=$?; } ; test $rc = 129 &&
	tail -1 run/log.jsonl | grep -q "\"event\":\"stop\"" &&
	head -1 run/params.gem | grep -q "\"version\":40"
'

test_expect_success 'SIGINT: 130, after the checkpoint' '
	start_server run &&
	kill -INT $SERVER_PID &&
	{ wait_exit $SERVER_PID; rc=$?; } ; test $rc = 130 &&
	tail -1 run/log.jsonl | grep -q "stopped by a signal"
'
test_done
