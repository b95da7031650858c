#!/bin/bash
# t3701: gem-work with an overlap (--overlap T: diloco and async-diloco's fragment commits in
# flight on a thread of their own while the next window's first T inner steps train) when the
# commit in flight meets trouble, as a commit without the overlap would: a worker told to stop
# takes its reply and then leaves, with no commit refused; a server restarted from its
# checkpoint is joined again and the run goes on; a server gone for good fails the worker (exit
# 1) once its retries are spent. The tiny model; the replays of t3700 show the arithmetic.
. "$(dirname "$0")/test-lib.sh"

# init RUN RULE N [gem-init options]: a run of the tiny task with 2 fragments, α 0.5, T = 1
init() {
	_run=$1 _rule=$2 _n=$3
	shift 3
	gem-init -q --model tiny.json --data data --rule "$_rule" --workers "$_n" --window 4 \
		--fragments 2 --mix 0.5 --overlap 1 --lr 0.1 --batch 32 --seed 5 "$@" "$_run"
}

# blob FILE: the params file without its header line (which holds the wall-clock elapsed)
blob() { tail -n +2 "$1"; }

test_expect_success 'setup' 'make_tiny_data data'

test_expect_success 'a worker stopped (SIGTERM) while its commit is in flight: reply, leave, 143' '
	init stop diloco 2 --epochs 10 &&
	start_server stop &&
	{ GEM_LOG=debug gem-work --server "$URL" 2>w0.err & p0=$!; } &&
	{ gem-work -q --server "$URL" --slowdown 20 2>w1.err & p1=$!; } &&
	test_when_finished "stop_if_running $p0 $p1 $SERVER_PID" &&
	# the fast one waits at its T-th step for the slow one'"'"'s commit to close the round
	wait_for_joins stop 2 &&
	wait_until "grep -q \"with the commit in flight\" w0.err" 60 &&
	kill -TERM $p0 &&
	{ wait_exit $p0 60; test $? = 143; } &&
	# the server writes its log out every 0.2 s
	wait_until "grep -q \"\\\"event\\\":\\\"leave\\\"\" stop/log.jsonl" 30 &&
	# the slow one finishes alone
	wait_exit $p1 120 && wait_exit $SERVER_PID 30 &&
	! grep -q "refused" stop/serve.err &&
	gem-sim -q --replay stop/log.jsonl stop-replay >/dev/null &&
	blob stop/params.gem >a && blob stop-replay/params.gem >b && cmp a b
'

test_expect_success 'a server restarted from its checkpoint under a worker with a commit in flight: joined again' '
	init restart async-diloco 1 &&
	start_server restart --worker-timeout 0 &&
	port=${URL##*:} && v0=$(health_version) &&
	{ GEM_LOG=debug gem-work --server "$URL" --steps 400 --retry-for 30 --slowdown 50 \
		2>w2.err & worker=$!; } &&
	test_bg $worker &&
	wait_until "[ \"\$(health_version)\" -ge $((v0 + 20)) ] 2>/dev/null" 60 &&
	curl -sf -X POST -d "{}" "$URL/v1/checkpoint" >/dev/null &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	{ gem-serve --listen 127.0.0.1:$port --worker-timeout 0 restart >/dev/null 2>serve2.err &
	  SERVER_PID=$!; } &&
	test_bg $SERVER_PID &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	wait $worker && tail -3 w2.err &&
	grep -q "joining again" w2.err &&
	grep -q "worker 0: 400 steps" w2.err
'

test_expect_success 'the server gone for good: the worker fails (exit 1) after --retry-for' '
	init gone async-diloco 1 &&
	start_server gone &&
	{ GEM_LOG=debug gem-work --server "$URL" --steps 100000 --retry-for 2 2>w3.err &
	  worker=$!; } &&
	test_bg $worker &&
	wait_until "grep -q \"with the commit in flight\" w3.err" 60 &&
	kill -9 $SERVER_PID && { wait_exit $SERVER_PID; true; } &&
	{ wait_exit $worker 60; test $? = 1; } &&
	tail -2 w3.err && grep -q "gem-work: worker 0: " w3.err
'
test_done
