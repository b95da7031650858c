#!/bin/bash
# t3101: a commit's reply tells that commit's own staleness and fate, whatever the server did
# before it (applied, refused as too stale, sent again after a lost reply); a commit of a run
# with fragments says one of its fragments and carries that slice, its reply that slice of θ.
. "$(dirname "$0")/test-lib.sh"

# commit WORKER BASE SEQ: POST one commit of small updates; the reply's header line on stdout
commit() {
	python3 "$GEM_SRC/t/gem-msg.py" --worker "$1" --base "$2" --seq "$3" --count 1108 \
		--value 0.001 >msg &&
	curl -sf -H "Authorization: Bearer secret" --data-binary @msg "$URL/v1/commit" | head -1
}
join() {
	curl -sf -H "Authorization: Bearer secret" -d "{\"worker\":$1,\"codec\":\"raw\"}" \
		"$URL/v1/join" >/dev/null
}
# field JSON KEY
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])" "$1" "$2"; }

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --rule dynsgd run &&
	echo secret >token &&
	start_server run --token-file token --max-staleness 1 --worker-timeout 0 &&
	join 0 && join 1
'

test_expect_success 'an applied commit: its τ' '
	r=$(commit 0 0 1) && test "$(field "$r" tau)" = 0 && test "$(field "$r" applied)" = True &&
	r=$(commit 0 1 2) && test "$(field "$r" tau)" = 0 &&
	r=$(commit 1 1 1) && test "$(field "$r" tau)" = 1 && test "$(field "$r" version)" = 3
'

# stale_refused: the log's last "refused" event is the stale commit's, τ 3 (the server flushes
# its log every 0.2 s: the line may come after the reply)
stale_refused() { grep '"refused"' run/log.jsonl | tail -1 | grep -q '"reason":"stale","tau":3'; }

test_expect_success 'a commit refused as too stale: its τ as the log says, not the last applied one' '
	r=$(commit 1 0 2) &&
	test "$(field "$r" applied)" = False && test "$(field "$r" tau)" = 3 &&
	wait_until stale_refused 5
'

# duplicate_logged: the resend's "duplicate" event is in the log (flushed every 0.2 s, as above)
duplicate_logged() { grep -q '"event":"duplicate",.*"worker":0' run/log.jsonl; }

test_expect_success 'a commit sent again: nothing applied, its own τ' '
	r=$(commit 0 1 2) &&
	test "$(field "$r" version)" = 3 && test "$(field "$r" tau)" = 2 &&
	wait_until duplicate_logged 5
'

test_expect_success 'out-of-range ids, sequence numbers and counts are refused, not narrowed' '
	python3 "$GEM_SRC/t/gem-msg.py" --worker 4294967296 --base 3 --count 1108 >big &&
	test "$(curl -s -o out -w "%{http_code}" -H "Authorization: Bearer secret" \
		--data-binary @big "$URL/v1/commit")" = 409 &&
	python3 "$GEM_SRC/t/gem-msg.py" --worker 0 --base 3 --seq -1 --count 1108 >neg &&
	test "$(curl -s -o out -w "%{http_code}" -H "Authorization: Bearer secret" \
		--data-binary @neg "$URL/v1/commit")" = 400 &&
	test "$(curl -s -o out -w "%{http_code}" -H "Authorization: Bearer secret" \
		-d "{\"worker\":4294967297}" "$URL/v1/leave")" = 400 &&
	curl -sf "$URL/v1/stats" | python3 -c "
import json,sys; s=json.load(sys.stdin)
assert [w[\"active\"] for w in s[\"workers\"]]==[True, True], s"
'
test_expect_success 'a run whose workers left, one of them unfinished, does not say every one finished' '
	curl -sf -H "Authorization: Bearer secret" -d "{\"worker\":0,\"done\":true}" "$URL/v1/leave" &&
	curl -sf -H "Authorization: Bearer secret" -d "{\"worker\":1,\"done\":false}" "$URL/v1/leave" &&
	wait_exit $SERVER_PID &&
	grep "\"event\":\"stop\"" run/log.jsonl | grep -q "every worker has left, 1 of 2 finished"
'

# post FILE: POST FILE to /v1/commit; its HTTP status on stdout, its body in out
post() {
	curl -s -o out -w "%{http_code}" -H "Authorization: Bearer secret" --data-binary @"$1" \
		"$URL/v1/commit"
}
# frag_msg FRAGMENT COUNT: a commit of worker 0 at version 0 saying that fragment, in msg
frag_msg() {
	python3 "$GEM_SRC/t/gem-msg.py" --worker 0 --base 0 --seq 1 --count "$2" --value 0.001 \
		--fragment "$1" >msg
}

test_expect_success 'fragments: one out of [0, P) or not of its slice is refused 400, nothing changes' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --rule async-diloco \
		--window 4 --fragments 2 frun &&
	start_server frun --token-file token --worker-timeout 0 &&
	join 0 && curl -sf "$URL/v1/params" | tail -n +2 >before &&
	for f in 2 -1 "\"1\"" 1.5; do
		frag_msg "$f" 554 && test "$(post msg)" = 400 && grep -q "bad_field" out &&
		grep -q "fragment" out || return 1
	done &&
	frag_msg 1 1108 && test "$(post msg)" = 400 && grep -q "bad_blob" out &&
	curl -sf "$URL/v1/params" | tail -n +2 >after && cmp before after &&
	! grep -v "\"event\"" frun/log.jsonl | grep -q version
'
test_expect_success 'fragments: a commit of fragment 1 is applied, its reply that slice of θ' '
	frag_msg 1 554 && test "$(post msg)" = 200 &&
	head -1 out | python3 -c "
import json, sys
h = json.loads(sys.stdin.readline())
assert h[\"version\"] == 1 and h[\"blobs\"][0][\"count\"] == 554, h" &&
	TOKEN=secret stop_server
'
test_done
