#!/bin/bash
# t6011: messages say what they mean: a server on every address prints and writes a URL others
# can reach (not 0.0.0.0), --public --no-token is warned about, "1 worker" and "1 update"
# (not "1 workers"), and a RUNDIR given with a trailing slash gives paths with one slash.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run
'

test_expect_success 'gem-serve on 0.0.0.0: a reachable URL, on stdout and in server.url' '
	gem-serve --listen 0.0.0.0:0 --public --no-token --idle-timeout 0 run/ >out 2>err &
	pid=$! &&
	test_when_finished "stop_if_running $pid" &&
	wait_for_file run/server.url &&
	url=$(cat run/server.url) && echo "$url" &&
	test "$(head -1 out)" = "$url" &&
	grep -q "warning: --public --no-token: anyone who reaches the port" err &&
	if command -v ip >/dev/null && ip -o -4 addr show scope global | grep -q inet; then
		! grep -q "0\.0\.0\.0" run/server.url out err
	fi &&
	curl -s --max-time 5 "$url/v1/health" | grep -q "\"version\"" &&
	kill -TERM $pid && { wait $pid; true; } &&
	! grep -q "run//" err
'

test_expect_success 'one worker, one update: no plural s' '
	gem-sim -n 1 --steps 2 run >/dev/null 2>err && cat err &&
	grep -q "gem-sim: 1 worker (1 finished" err &&
	gem-work --local run --steps 1 2>err && cat err &&
	grep -q "gem-work: 1 update, " err
'

test_expect_success 'a log path made from RUNDIR/ has one slash' '
	mkdir -p empty && echo "{\"event\":\"start\"}" >empty/log.jsonl &&
	{ gem-plot-data loss empty/ 2>err; true; } && cat err &&
	grep -q "empty/log.jsonl: no update lines (1 line read)" err && ! grep -q "empty//" err
'

test_done
