#!/bin/bash
# t3110: a commit held for its round (rule sync) and sent again while the round is open: the
# resend waits for the round in the first one's place, so the round makes one reply and it goes
# where the worker listens now: the round's new θ, as a delta from the copy the worker holds
# (int8), byte for byte the reply of the same run without the resend, with the server's copy
# advanced once (the next round's reply is the same too) and the update applied once. gem-work
# --round-timeout bounds the wait for a round's reply; past it the error names the option, and
# within --retry-for the commit is sent again and waits again: the worker's copy stays the
# server's, and the run's θ is bit for bit the one of the run without the resend.
. "$(dirname "$0")/test-lib.sh"

msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 --value 0.001 --codec int8 "$@"; }
# reply FILE: the blob's name and codec, and the header's version and copy_crc32
reply() {
	head -1 "$1" | python3 -c 'import json, sys; h = json.load(sys.stdin); b = h["blobs"][0]
print(b["name"], b["codec"], h["version"], h.get("copy_crc32", "-"))'
}
# events DIR EVENT: how many EVENT lines DIR's log has
events() { grep -c "\"event\":\"$2\"" "$1/log.jsonl"; }
# rounds DIR RESEND: DIR's server, workers 0 and 1 joined in int8, two rounds of one commit
# each, worker 0's first (held), worker 1's closing the round; with RESEND, worker 0's first
# commit gives up after the hold (its connection closed) and is sent again before worker 1's.
# Worker 0's replies in DIR/r1.msg and DIR/r2.msg, θ at the end in DIR/theta.msg.
rounds() {
	start_server "$1" --keep-running --worker-timeout 0 &&
	for w in 0 1; do
		curl -sf -o "$1/join$w.msg" -X POST -d "{\"codec\":\"int8\"}" "$URL/v1/join" || return 1
	done &&
	for seq in 1 2; do
		msg --worker 0 --seq $seq --base $((seq - 1)) >m0 &&
		msg --worker 1 --seq $seq --base $((seq - 1)) >m1 &&
		if [ "$2" = 1 ] && [ $seq = 1 ]; then
			{ curl -s --max-time 1 -o /dev/null -X POST --data-binary @m0 "$URL/v1/commit"
			  test $? = 28; } &&
			wait_until "test \"\$(events $1 held)\" = 1" 10 &&
			{ curl -sf -o "$1/r$seq.msg" -X POST --data-binary @m0 "$URL/v1/commit" & pid=$!; } &&
			wait_until "test \"\$(events $1 resent)\" = 1" 10
		else
			{ curl -sf -o "$1/r$seq.msg" -X POST --data-binary @m0 "$URL/v1/commit" & pid=$!; } &&
			wait_until "test \"\$(events $1 held)\" = $seq" 10
		fi &&
		curl -sf -o /dev/null -X POST --data-binary @m1 "$URL/v1/commit" &&
		wait_exit $pid 10 || return 1
	done &&
	curl -sf -o "$1/theta.msg" "$URL/v1/params?codec=raw" &&
	stop_server
}

test_expect_success 'setup' '
	make_tiny_data data &&
	for d in plain resent; do
		gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --rule sync \
			--workers 2 $d || return 1
	done
'

test_expect_success 'two rounds, no resend' '
	rounds plain 0 &&
	reply plain/r1.msg >r && cat r && grep -q "^delta int8 1 [0-9]" r
'

test_expect_success 'a resend of the held commit waits for the round: the round'"'"'s θ, once' '
	rounds resent 1 &&
	reply resent/r1.msg >r && cat r && grep -q "^delta int8 1 [0-9]" r &&
	test "$(events resent duplicate)" = 0 &&
	test "$(events resent held)" = 2 &&
	test "$(grep -c "\"tau\":" resent/log.jsonl)" = 2
'

test_expect_success 'its replies and θ are those of the run without the resend, byte for byte' '
	cmp plain/r1.msg resent/r1.msg &&
	cmp plain/r2.msg resent/r2.msg &&
	tail -n +2 plain/theta.msg >a.blob && tail -n +2 resent/theta.msg >b.blob && cmp a.blob b.blob
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

# pair DIR [OPTIONS]: a sync run of two workers in int8: gem-work (4 steps, with OPTIONS; its
# debug output in DIR.err) and worker 1, made here, which commits in each round once gem-work's
# commit is held, and with OPTIONS in the first round only once that commit was sent again.
pair() {
	_dir=$1; shift
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --rule sync \
		--workers 2 $_dir &&
	start_server $_dir &&
	{ GEM_LOG=debug gem-work -q --server "$URL" --steps 4 --codec int8 "$@" 2>$_dir.err &
	  fast=$!; } &&
	test_bg $fast &&
	wait_for_joins $_dir 1 &&
	curl -sf -o /dev/null -X POST -d "{\"codec\":\"int8\"}" "$URL/v1/join" &&
	for seq in 1 2 3 4; do
		wait_until "test \"\$(events $_dir held)\" = $seq" 30 &&
		{ [ $# = 0 ] || [ $seq != 1 ] ||
		  wait_until "test \"\$(events $_dir resent)\" = 1" 30; } &&
		curl -sf -o /dev/null -X POST --data-binary @u$seq "$URL/v1/commit" || return 1
	done &&
	wait_exit $fast && stop_server && cat $_dir.err
}

test_expect_success 'within --retry-for a timed-out commit is sent again; the copies stay equal' '
	for seq in 1 2 3 4; do
		msg --worker 1 --seq $seq --base $((seq - 1)) >u$seq || return 1
	done &&
	pair slow --round-timeout 3 --retry-for 60 &&
	grep -q "slice 0: 4 replies as deltas; the copy'"'"'s CRC-32 \([0-9a-f]*\), the server'"'"'s last \1$" slow.err &&
	test "$(events slow resent)" = 1 &&
	test "$(events slow duplicate)" = 0
'

test_expect_success 'that run'"'"'s θ is the run'"'"'s without the resend, bit for bit' '
	pair calm &&
	test "$(events calm resent)" = 0 &&
	tail -n +2 slow/params.gem >a.blob && tail -n +2 calm/params.gem >b.blob && cmp a.blob b.blob
'

test_done
