#!/bin/bash
# t3612: an SGP node holds its node's lock (a second node I on the run is refused), gem-run
# leaves no node-I.url behind, and a node told to stop while a peer is stopped (SIGSTOP: the
# connection is taken, no answer comes) stops at once instead of after its requests' timeout.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run0
'

# start_node I PEERS_FILE [options]: a node of run0 in the background; NODE_PID_I set
start_node() {
	_i=$1 _pf=$2; shift 2
	gem-work -q --rule sgp --run run0 --node "$_i" --peers-file "$_pf" "$@" \
		>"run0/n$_i.url" 2>"run0/n$_i.err" &
	eval "NODE_PID_$_i=$!"
	test_bg $!
}

test_expect_success 'a second node 0 of the run is refused (exit 2), naming the first' '
	start_node 0 run0/never --retry-for 60 &&
	test_when_finished "stop_if_running $NODE_PID_0" &&
	wait_for_file run0/n0.url &&
	{ gem-work -q --rule sgp --run run0 --node 0 --peers-file run0/never >/dev/null 2>err; test $? = 2; } &&
	cat err && grep -q "run0: node 0 runs already (pid $NODE_PID_0)" err &&
	kill -0 $NODE_PID_0
'

test_expect_success 'gem-run --rule sgp leaves no node-I.url' '
	gem-run -q -n 2 --rule sgp --model tiny.json --data data --batch 32 sgp >out &&
	grep -q "^average" out && test -f sgp/node-1.gem && ! ls sgp/node-*.url
'

test_expect_success 'a node told to stop while its peer is SIGSTOPped stops at once, saved' '
	rm -f run0/p0 run0/n0.url run0/n1.url run0/node-0.gem &&
	start_node 0 run0/p0 --retry-for 120 --epochs 100 --slowdown 5 &&
	start_node 1 run0/p0 --retry-for 120 --epochs 100 --slowdown 5 &&
	test_when_finished "kill -CONT $NODE_PID_1; stop_if_running $NODE_PID_0 $NODE_PID_1" &&
	wait_for_file run0/n0.url && wait_for_file run0/n1.url &&
	cat run0/n0.url run0/n1.url >run0/p0.tmp && mv run0/p0.tmp run0/p0 &&
	wait_until "test \"\$(grep -vc event run0/node-1.jsonl 2>/dev/null)\" -ge 3" &&
	# node 1 stops answering: node 0 waits on a push (its timeout: 600 s) until told to stop
	kill -STOP $NODE_PID_1 &&
	# node 0 is stuck on it: its version no longer moves
	wait_stalled "health_version \$(cat run0/n0.url)" &&
	kill -TERM $NODE_PID_0 &&
	{ wait_exit $NODE_PID_0 30; rc=$?; } ; cat run0/n0.err; test $rc = 143 &&
	head -1 run0/node-0.gem | python3 -c "
import json, sys; h = json.load(sys.stdin)
assert h[\"node\"] == 0 and h[\"version\"] >= 3, h"
'

test_done
