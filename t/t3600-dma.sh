#!/bin/bash
# t3600: delayed model averaging end to end: workers that send their delta every β steps and
# carry on without waiting learn the tiny task; each one reports the time it spent blocked.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' 'make_tiny_data data'

test_expect_success 'gem-init --rule dma: β from --window (default 4), workers per round' '
	gem-init -q --rule dma --workers 3 --model tiny.json --data data run-default &&
	python3 -c "
import json; r=json.load(open(\"run-default/run.json\"))[\"rule\"]
assert r[\"name\"]==\"dma\" and r[\"window\"]==4 and r[\"nworkers\"]==3, r"
'

test_expect_success 'gem-run -n 2 --rule dma --window 4 learns the tiny task' '
	gem-run -q -n 2 --rule dma --window 4 --model tiny.json --data data --lr 0.1 \
		--batch 32 --epochs 2 --seed 5 run >eval.tsv &&
	cat eval.tsv &&
	awk "NR==2 { exit !(\$5 > 0.85) }" eval.tsv &&
	grep -q "\"window\": 4" run/run.json
'

# 2 epochs of 2000 samples at batch 32: 126 steps per worker, 32 cycles of β = 4 (the last of 2)
test_expect_success 'one version per cycle, every delta on top of the newest model' '
	python3 -c "
import json
ups=[json.loads(l) for l in open(\"run/log.jsonl\") if \"event\" not in l]
assert all(u[\"tau\"]==0 for u in ups), \"a delta is built on X_j and added to X_j\"
assert len(ups)==32, len(ups)
assert [u[\"version\"] for u in ups]==list(range(1, 33)), [u[\"version\"] for u in ups]"
'

test_expect_success 'each worker reports its idle time' '
	gem-init -q --rule dma --window 4 --workers 2 --model tiny.json --data data --lr 0.1 \
		--batch 32 --seed 5 run2 &&
	start_server run2 &&
	{ gem-work --server "$URL" 2>w0.err & p0=$!; } &&
	{ gem-work --server "$URL" 2>w1.err & p1=$!; } &&
	test_when_finished "stop_if_running $p0 $p1 $SERVER_PID" &&
	wait_exit $p0 60 && wait_exit $p1 60 &&
	wait_exit $SERVER_PID 30 &&
	cat w0.err w1.err >w.err && cat w.err &&
	idle=", idle [0-9]+\.[0-9]+ s \([0-9]+\.[0-9]%\), [0-9.]+ s of it in the last round$" &&
	grep -Eq "worker 0: .*$idle" w.err && grep -Eq "worker 1: .*$idle" w.err
'

# the TERM waits for both joins: worker 0 stopped before it joined (a slow start under load)
# leaves a round of --workers 2 that worker 1 waits in for ever
test_expect_success 'a dma worker interrupted mid-cycle leaves; the other finishes alone' '
	gem-init -q --rule dma --window 4 --workers 2 --model tiny.json --data data --lr 0.1 \
		--batch 32 --epochs 50 --seed 5 run3 &&
	start_server run3 &&
	{ gem-work -q --server "$URL" --slowdown 20 2>w0.err & p0=$!; } &&
	{ gem-work -q --server "$URL" 2>w1.err & p1=$!; } &&
	test_when_finished "stop_if_running $p0 $p1 $SERVER_PID" &&
	# a round applied: worker 0 is in a later cycle, mid-way (its steps are 20 times slower)
	wait_for_joins run3 2 &&
	wait_until "[ \"\$(grep -vc \"\\\"event\\\"\" run3/log.jsonl)\" -ge 1 ]" 30 &&
	kill -TERM $p0 &&
	{ wait_exit $p0 30; test $? = 143; } &&
	wait_exit $p1 60 && cat w0.err w1.err &&
	wait_exit $SERVER_PID 30 &&
	grep -q "\"event\":\"leave\"" run3/log.jsonl
'

test_done
