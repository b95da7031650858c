#!/bin/bash
# t3110: gem-work --round-timeout bounds the wait for a round's reply; past it the error names
# the option.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success 'past --round-timeout the worker fails, and says which option' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --rule sync \
		--workers 2 alone &&
	start_server alone &&
	exits 1 gem-work -q --server "$URL" --steps 3 --round-timeout 3 --retry-for 0 2>work.err &&
	cat work.err &&
	grep -q "no reply to the commit in 3 s.*--round-timeout" work.err &&
	stop_if_running $SERVER_PID
'

test_done
