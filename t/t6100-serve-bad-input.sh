#!/bin/bash
# t6100: whatever a client sends, gem-serve answers a 4xx JSON error, keeps serving and
# leaves θ as it was.
. "$(dirname "$0")/test-lib.sh"
msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 "$@"; }

test_expect_success 'setup: a server with one worker joined' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run &&
	start_server run --worker-timeout 0 &&
	curl -sf -X POST -d "{}" "$URL/v1/join" | head -1 | grep -q "\"worker\":0" &&
	curl -sf "$URL/v1/params?codec=raw" >before.msg
'

test_expect_success 'bad JSON on join: 400' '
	expect_error 400 bad_json -X POST -d "{not json" "$URL/v1/join"
'
test_expect_success 'a commit that is not a message: 400' '
	expect_error 400 bad_message -X POST --data-binary "garbage" "$URL/v1/commit"
'
test_expect_success 'a commit from an unknown worker: 409' '
	msg --worker 7 >m && expect_error 409 unknown_worker -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'a blob of the wrong size: 400' '
	python3 "$GEM_SRC/t/gem-msg.py" --count 1000 >m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'a CRC mismatch: 400' '
	msg --bad-crc >m && expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'bad zlib data: 400' '
	msg --codec zlib --bad-zlib >m && expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'a truncated message: 400' '
	msg --short >m && expect_error 400 bad_message -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'NaN in an update: 400' '
	msg --nan >m && expect_error 400 non_finite -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'fp16: an infinite half, a raw-sized blob: 400' '
	msg --codec fp16 --value 0.001 --inf-half >m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "infinite or NaN" reply.json &&
	msg --value 0.001 >m && sed -i "1s/\"raw\"/\"fp16\"/" m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "fp16 size" reply.json
'
test_expect_success 'an update blob under another name: 400' '
	msg --blob-name params >m && expect_error 400 bad_message -X POST --data-binary @m "$URL/v1/commit"
'
test_expect_success 'an oversized body: 413' '
	head -c 8000000 /dev/zero >big && expect_error 413 too_large -X POST --data-binary @big "$URL/v1/commit"
'
test_expect_success 'an unknown path: 404; a wrong method: 405' '
	test "$(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/nothing")" = 404 &&
	test "$(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/commit")" = 405
'
test_expect_success 'the server still answers and θ is untouched' '
	curl -sf "$URL/v1/health" | grep -q "\"version\": *0" &&
	curl -sf "$URL/v1/params?codec=raw" >after.msg &&
	tail -n +2 before.msg >b && tail -n +2 after.msg >a && cmp a b
'
test_expect_success 'a good commit is applied after all that' '
	msg --value 0.001 --seq 1 >m &&
	test "$(curl -s -o /dev/null -w "%{http_code}" -X POST --data-binary @m "$URL/v1/commit")" = 200 &&
	curl -sf "$URL/v1/health" | grep -q "\"version\": *1"
'
test_expect_success 'a good fp16 commit is applied, and θ comes back in fp16' '
	msg --codec fp16 --value 0.001 --seq 2 --base 1 >m &&
	curl -sf -o reply.msg -X POST --data-binary @m "$URL/v1/commit" &&
	head -1 reply.msg | grep -q "\"codec\":\"fp16\"" &&
	curl -sf "$URL/v1/health" | grep -q "\"version\": *2"
'
test_expect_success 'refused commits are counted and logged' '
	curl -sf "$URL/v1/stats" | python3 -c "import json,sys; s=json.load(sys.stdin); assert s[\"workers\"][0][\"refused\"]==7, s" &&
	grep -q "\"event\":\"refused\"" run/log.jsonl
'
test_done
