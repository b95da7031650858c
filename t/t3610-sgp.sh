#!/bin/bash
# t3610: SGP end to end on the tiny model: gem-run -n 3 --rule sgp learns (synchronous and
# Overlap-SGP), the nodes' files and logs, their bytes on the wire, two runs with two in-peers
# per iteration end bit for bit the same, a running node's endpoints, gem-eval --nodes, and nodes
# that disagree on the topology refuse to run.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run0
'

# mean_acc FILE: the mean row's test accuracy in gem-eval --nodes output
mean_acc() { awk -F"\t" '$1 == "mean" { print $5 }' "$1"; }

test_expect_success 'gem-run -n 3 --rule sgp: three nodes learn, on disjoint parts' '
	gem-run -q -n 3 --rule sgp --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 sgp >out &&
	cat out &&
	test "$(grep -c "^[0-9]" out)" = 3 &&
	grep -q "^average" out &&
	awk "BEGIN { exit !($(mean_acc out) > 0.85) }" &&
	test -f sgp/node-0.gem && test -f sgp/node-2.jsonl && test -f sgp/peers &&
	test "$(wc -l <sgp/peers)" = 3 &&
	head -1 sgp/node-0.gem | grep -q "\"head_crc32\":[0-9]*} *$"
'

test_expect_success 'each node logs its iterations with w, and saves z with w' '
	python3 -c "
import json
for i in range(3):
    lines = [json.loads(l) for l in open(\"sgp/node-%d.jsonl\" % i)]
    ev = [l for l in lines if \"event\" in l]
    ups = [l for l in lines if \"event\" not in l]
    assert ev[0][\"event\"] == \"start\" and ev[0][\"rule\"] == \"sgp\", ev
    assert ev[1][\"event\"] == \"sgp\" and ev[1][\"nodes\"] == 3 and ev[1][\"part\"] == [i, 3], ev
    assert [u[\"version\"] for u in ups] == list(range(1, 22)), len(ups)
    assert all(u[\"worker\"] == i and u[\"w\"] == 1 and u[\"msgs\"] == 1 for u in ups), ups[0]
    assert all(\"dist\" in u and u[\"dist\"] >= 0 for u in ups)
    assert 660 <= ups[-1][\"samples\"] <= 672, ups[-1]
" &&
	head -1 sgp/node-1.gem | python3 -c "
import json, sys; h = json.load(sys.stdin)
assert h[\"node\"] == 1 and h[\"nodes\"] == 3 and h[\"version\"] == 21 and h[\"w\"] == 1, h" &&
	gem-eval sgp/node-1.gem >one &&
	grep -q "^[0-9.]*	21	" one
'

test_expect_success 'Overlap-SGP learns and conserves the push-sum mass' '
	gem-run -q -n 3 --rule sgp --work-opt=--overlap --work-opt=--epochs=2 --model tiny.json \
		--data data --lr 0.1 --batch 32 --seed 3 ov >out &&
	cat out &&
	awk "BEGIN { exit !($(mean_acc out) > 0.85) }" &&
	python3 -c "
import json
ws = [json.loads(open(\"ov/node-%d.gem\" % i, \"rb\").readline())[\"w\"] for i in range(3)]
assert abs(sum(ws) - 3) < 1e-6, ws
ev = json.loads(open(\"ov/node-0.jsonl\").readlines()[0])
assert ev[\"rule\"] == \"overlap-sgp\", ev"
'

test_expect_success 'two in-peers per iteration: two runs end with the same parameters' '
	for r in p1 p2; do
		gem-run -q -n 4 --rule sgp --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 \
			--steps 20 --work-opt=--topology=ring --work-opt=--peers-per-iter=2 $r >/dev/null ||
		return 1
	done &&
	for i in 0 1 2 3; do
		python3 "$GEM_SRC/t/gem-theta.py" p1/node-$i.gem >a.theta &&
		python3 "$GEM_SRC/t/gem-theta.py" p2/node-$i.gem >b.theta &&
		test -s a.theta && cmp a.theta b.theta || return 1
	done
'

test_expect_success 'gem-eval --nodes: a list of node files, and the run directory' '
	gem-eval --nodes sgp/node-0.gem,sgp/node-1.gem >two &&
	test "$(grep -c "^[0-9]" two)" = 2 &&
	gem-eval --json --nodes sgp >all.json &&
	python3 -c "
import json
rows = [json.loads(l) for l in open(\"all.json\")]
assert [r[\"node\"] for r in rows] == [0, 1, 2, \"mean\", \"sd\", \"average\"], rows
assert rows[-1][\"consensus\"] == 0 and all(r[\"consensus\"] >= 0 for r in rows)"
'

test_expect_success 'bytes: a push is counted by its sender (bytes_out) and its receiver (bytes_in)' '
	python3 -c "
import json
ins = outs = 0
for i in range(3):
    lines = [json.loads(l) for l in open(\"sgp/node-%d.jsonl\" % i)]
    ups = [l for l in lines if \"event\" not in l]
    # one push out per iteration, delivered within it: tiny θ raw is 4,432 bytes, and a header
    # (one in too, but taken when it comes, which may be counted on the line before or after)
    assert all(u[\"bytes_out\"] > 4432 for u in ups), ups[0]
    assert lines[-1][\"event\"] == \"stop\" and lines[-1][\"reason\"] == \"finished\", lines[-1]
    outs += sum(l.get(\"bytes_out\", 0) for l in lines)
    ins += sum(l.get(\"bytes_in\", 0) for l in lines)
assert ins == outs, (ins, outs)
print(outs)" >sent.total &&
	gem-eval --nodes sgp >b.tsv &&
	head -1 b.tsv | grep -q "	consensus	bytes$" &&
	for i in 0 1 2; do
		python3 -c "
import json
print(sum(json.loads(l).get(\"bytes_out\", 0) for l in open(\"sgp/node-$i.jsonl\")))" >want &&
		awk -F"\t" -v i=$i "\$1 == i { print \$7 }" b.tsv >got && cmp want got || return 1
	done &&
	awk -F"\t" "\$1 == \"average\" { print \$7 }" b.tsv >got && cmp sent.total got &&
	gem-eval --json --nodes sgp | python3 -c "
import sys, json
rows = [json.loads(l) for l in sys.stdin]
assert rows[-1][\"bytes\"] == int(open(\"sent.total\").read()), rows[-1]"
'

test_expect_success 'a node says the bytes it took and sent at its end' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 pair &&
	for i in 0 1; do
		gem-work --rule sgp --run pair --node $i --peers-file pair/peers --retry-for 30 -t 5 \
			>pair/n$i.url 2>pair/n$i.err &
		eval "p$i=\$!" && test_bg $! || return 1
	done &&
	test_when_finished "stop_if_running $p0 $p1" &&
	wait_for_file pair/n0.url && wait_for_file pair/n1.url &&
	cat pair/n0.url pair/n1.url >pair/p.tmp && mv pair/p.tmp pair/peers &&
	wait $p0 && wait $p1 &&
	cat pair/n0.err &&
	in=$(sed -n "s/.*node 0: .*, \([0-9]*\) bytes in, \([0-9]*\) out$/\1/p" pair/n0.err) &&
	out=$(sed -n "s/.*node 1: .*, \([0-9]*\) bytes in, \([0-9]*\) out$/\2/p" pair/n1.err) &&
	test "$in" -gt 4432 && test "$in" = "$out"
'

test_expect_success 'a node waiting for its peers serves its run, z and health' '
	gem-work -q --rule sgp --run run0 --node 0 --peers-file run0/never --retry-for 30 \
		>run0/node.url 2>run0/node.err &
	pid=$! && test_bg $pid &&
	test_when_finished "stop_if_running $pid" &&
	wait_for_file run0/node.url &&
	u=$(cat run0/node.url) &&
	curl -sf "$u/v1/health" | grep -q "\"ready\": *false" &&
	curl -sf "$u/v1/params" | head -1 | grep -q "\"version\": *0," &&
	gem-eval "$u" >live &&
	grep -q "^[0-9.]*	0	0	" live &&
	gem-eval --nodes "$u" >live2 && grep -q "^average" live2 &&
	curl -s -X POST --data-binary "x" "$u/v1/push" | grep -q "\"error\"" &&
	kill $pid && { wait $pid; test $? -ge 128; }
'

# start_node I PEERS_FILE [options]: a node of run0 in the background; NODE_PID_I set
start_node() {
	_i=$1 _pf=$2; shift 2
	gem-work -q --rule sgp --run run0 --node "$_i" --peers-file "$_pf" --retry-for 5 "$@" \
		>"run0/n$_i.url" 2>"run0/n$_i.err" &
	eval "NODE_PID_$_i=$!"
	test_bg $!
}

test_expect_success 'nodes with different peer lists refuse to run (exit 2)' '
	rm -f run0/p0 run0/p1 run0/n0.url run0/n1.url &&
	start_node 0 run0/p0 && start_node 1 run0/p1 &&
	test_when_finished "stop_if_running $NODE_PID_0 $NODE_PID_1" &&
	wait_for_file run0/n0.url && wait_for_file run0/n1.url &&
	cat run0/n0.url run0/n1.url >run0/p0.tmp && mv run0/p0.tmp run0/p0 &&
	{ cat run0/n0.url run0/n1.url && echo http://127.0.0.1:9; } >run0/p1.tmp &&
	mv run0/p1.tmp run0/p1 &&
	{ wait_exit $NODE_PID_0 30; r0=$?; } ; { wait_exit $NODE_PID_1 30; r1=$?; } ;
	cat run0/n0.err run0/n1.err &&
	test $r0 = 2 && test $r1 = 2 &&
	grep -q "another topology" run0/n0.err run0/n1.err
'

test_expect_success 'nodes with different topologies refuse to run (exit 2)' '
	rm -f run0/p0 run0/n0.url run0/n1.url &&
	start_node 0 run0/p0 && start_node 1 run0/p0 --topology ring &&
	test_when_finished "stop_if_running $NODE_PID_0 $NODE_PID_1" &&
	wait_for_file run0/n0.url && wait_for_file run0/n1.url &&
	cat run0/n0.url run0/n1.url >run0/p0.tmp && mv run0/p0.tmp run0/p0 &&
	{ wait_exit $NODE_PID_0 30; r0=$?; } ; { wait_exit $NODE_PID_1 30; r1=$?; } ;
	cat run0/n0.err run0/n1.err &&
	test $r0 = 2 && test $r1 = 2 &&
	grep -q "ring" run0/n0.err
'

test_expect_success 'a node told to stop while its peer is gone stops at once and saves its state' '
	rm -f run0/p0 run0/n0.url run0/n1.url run0/node-0.gem &&
	start_node 0 run0/p0 --retry-for 120 --epochs 100 --slowdown 5 &&
	start_node 1 run0/p0 --retry-for 120 --epochs 100 --slowdown 5 &&
	test_when_finished "stop_if_running $NODE_PID_0 $NODE_PID_1" &&
	wait_for_file run0/n0.url && wait_for_file run0/n1.url &&
	cat run0/n0.url run0/n1.url >run0/p0.tmp && mv run0/p0.tmp run0/p0 &&
	for i in $(seq 200); do
		test "$(grep -vc event run0/node-1.jsonl 2>/dev/null)" -ge 3 2>/dev/null && break
		sleep 0.1
	done &&
	# node 1 dies: node 0 retries its pushes to it (for --retry-for 120 s) until told to stop
	kill -9 $NODE_PID_1 &&
	# node 0 is stuck on it: its version no longer moves
	wait_stalled "health_version \$(cat run0/n0.url)" &&
	kill -TERM $NODE_PID_0 &&
	{ wait_exit $NODE_PID_0 20; rc=$?; } ; cat run0/n0.err; test $rc = 143 &&
	grep -q "interrupted" run0/n0.err &&
	head -1 run0/node-0.gem | python3 -c "
import json, sys; h = json.load(sys.stdin)
assert h[\"node\"] == 0 and h[\"version\"] >= 3, h"
'

test_expect_code 2 'gem-work --rule sgp without --peers: bad usage' '
	gem-work --rule sgp --run run0
'
test_expect_code 2 'gem-work --rule dma: only sgp is a node rule' '
	gem-work --rule dma --run run0 --peers http://127.0.0.1:1
'
test_expect_code 2 'gem-work --overlap without --rule sgp: bad usage' '
	gem-work --server http://127.0.0.1:1 --overlap
'
test_expect_code 2 'a node not in its peer list: refused' '
	gem-work -q --rule sgp --run run0 --peers http://127.0.0.1:1,http://127.0.0.1:2 >/dev/null
'

test_done
