#!/bin/bash
# t6430: a worker that joins again under its own id while its commit is held for a round (a
# restarted worker, or one that gave up waiting) does not stall the round, for every rule with
# rounds (sync, dma, diloco, diloco with fragments): the rejoin is answered at once, the old
# session's held commit is answered 409 "rejoined", and the round closes with the workers it
# has. The same with a worker SIGKILLed while its commit is held and restarted under its id
# beside gem-run's worker: the run ends, complete.
. "$(dirname "$0")/test-lib.sh"

# events DIR EVENT: how many EVENT lines DIR's log has
events() { grep -c "\"event\":\"$2\"" "$1/log.jsonl"; }
# commit_bg NAME MSGFILE: POST MSGFILE to /v1/commit in the background: status in NAME.code,
# body in NAME.out, pid in $bgpid
commit_bg() {
	{ curl -s --max-time 30 -o "$1.out" -w "%{http_code}" -X POST --data-binary @"$2" \
		"$URL/v1/commit" >"$1.code" & bgpid=$!; } &&
	test_bg $bgpid
}

# rejoin DIR COUNT [FRAGMENT]: workers 0 and 1 join DIR's server; 0 commits (held), joins again,
# then 1 and 0 (a new seq) commit: each is answered, the round closes (version 1)
rejoin() {
	dir=$1 count=$2 frag=${3:+--fragment $3}
	start_server $dir --keep-running --worker-timeout 0 &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	curl -sf -o /dev/null -X POST -d "{}" "$URL/v1/join" &&
	curl -sf -o /dev/null -X POST -d "{}" "$URL/v1/join" &&
	for w in 0 1; do
		for seq in 1 2; do
			python3 "$GEM_SRC/t/gem-msg.py" --count $count --value 0.001 --worker $w \
				--seq $seq --base 0 $frag >m$w.$seq || return 1
		done
	done &&
	commit_bg old m0.1 && old=$bgpid &&
	wait_until "test \"\$(events $dir held)\" = 1" 10 &&
	code=$(curl -s --max-time 10 -o rejoin.msg -w "%{http_code}" -X POST -d "{\"worker\":0}" \
		"$URL/v1/join") &&
	echo "rejoin: $code" && test "$code" = 200 &&
	wait_exit $old 10 &&
	echo "old session's commit: $(cat old.code) $(cat old.out)" &&
	test "$(cat old.code)" = 409 && grep -q "\"error\": *\"rejoined\"" old.out &&
	commit_bg b m1.1 && b=$bgpid &&
	wait_until "test \"\$(events $dir held)\" = 2" 10 &&
	code=$(curl -s --max-time 10 -o a2.msg -w "%{http_code}" -X POST --data-binary @m0.2 \
		"$URL/v1/commit") &&
	echo "new session's commit: $code" && test "$code" = 200 &&
	wait_exit $b 10 && test "$(cat b.code)" = 200 &&
	test "$(health_version)" = 1 &&
	head -1 a2.msg | grep -q "\"version\": *1" &&
	stop_server
}

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --rule sync --workers 2 sync &&
	gem-init -q --model tiny.json --data data --rule dma --workers 2 dma &&
	gem-init -q --model tiny.json --data data --rule diloco --workers 2 --window 8 diloco &&
	gem-init -q --model tiny.json --data data --rule diloco --workers 2 --window 8 \
		--fragments 4 frag
'

test_expect_success 'sync: a rejoin while held ends that commit 409, the round goes on' '
	rejoin sync 1108
'

test_expect_success 'dma: the same' '
	rejoin dma 1108
'

test_expect_success 'diloco: the same' '
	rejoin diloco 1108
'

test_expect_success 'diloco with 4 fragments (fragment 0, 277 floats): the same' '
	rejoin frag 277 0
'

# descendants PID: every process below PID
descendants() {
	for _c in $(ps -o pid= --ppid "$1"); do
		echo $_c
		descendants $_c
	done
}

test_expect_success 'a worker SIGKILLed while held and restarted beside gem-run: the run completes' '
	gem-init -q --model tiny.json --data data --rule sync --workers 2 --batch 32 run &&
	{ gem-run -q --resume -n 1 --steps 6 run >run.tsv 2>run.err & runpid=$!; } &&
	test_bg $runpid &&
	wait_for_joins run 1 &&
	w0=$(for p in $(descendants $runpid); do
		ps -o args= -p $p | grep -q "^[^ ]*gem-work " && echo $p; done | head -1) &&
	echo "gem-run'"'"'s worker: $w0" && test -n "$w0" &&
	kill -STOP $w0 &&
	test_when_finished "kill -CONT $w0 2>/dev/null; true" &&
	{ gem-work -q --server run --worker-id 1 2>w1.err & w1=$!; } &&
	test_bg $w1 &&
	wait_until "grep -q \"\\\"event\\\":\\\"held\\\".*\\\"worker\\\":1\" run/log.jsonl" 60 &&
	kill -9 $w1 && { wait $w1; true; } &&
	{ gem-work -q --server run --worker-id 1 2>w1b.err & w1b=$!; } &&
	test_bg $w1b &&
	wait_for_joins run 3 &&
	kill -CONT $w0 &&
	wait_exit $w1b 120 &&
	wait_exit $runpid 120 &&
	cat run.tsv &&
	grep -q "^[0-9]" run.tsv &&
	grep "\"event\":\"join\",.*\"worker\":1," run/log.jsonl | tail -1 | grep -q "\"rejoin\":true" &&
	grep -q "\"event\":\"end\".*complete" run/log.jsonl
'

test_done
