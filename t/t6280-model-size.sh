#!/bin/bash
# t6280: a model's size is bounded before anything of that size is allocated: gem-init refuses
# a spec of more parameters than gem's limit (or the machine's memory) with its size named, and
# so do gem-eval and gem-work when the model comes from a server's GET /v1/run (a hostile
# server cannot make them allocate tens of GB).
. "$(dirname "$0")/test-lib.sh"

# big.json: 65536 inputs, a dense layer of 2^20: 68731011082 parameters, 32 times the limit, so
# far beyond any machine's memory that no build of gem can allocate it.
test_expect_success 'setup' '
	make_tiny_data data &&
	cat >big.json <<-\EOF &&
	{"input": [65536], "classes": 10,
	 "layers": [{"type": "dense", "out": 1048576}, {"type": "dense", "out": 10}, {"type": "logsoftmax"}]}
	EOF
	gem-init -q --model tiny.json --data data run
'

test_expect_success 'gem-init refuses a model over the limit, naming its size, at once' '
	{ /usr/bin/time -f "%M" -o rss gem-init -q --model big.json --data data big 2>err; test $? = 2; } &&
	cat err rss &&
	grep -q "big.json: 68731011082 parameters (549.8 GB with their gradient): more than gem'"'"'s limit of 2147483648" err &&
	test "$(tail -1 rss)" -lt 100000 &&
	test ! -e big
'

test_expect_success 'a server whose run names that model: gem-eval and gem-work refuse it' '
	python3 - <<-\PY &&
	import json
	r = json.load(open("run/run.json"))
	r["model"] = json.load(open("big.json"))
	json.dump(r, open("hostile-run.json", "w"))
	PY
	start_fake_server hostile-run.json &&
	test_when_finished "kill $FAKE_PID 2>/dev/null; true" &&
	url=$FAKE_URL &&
	# gem-eval: a run it cannot use, refused before anything is done (gem(7)), is 2
	{ /usr/bin/time -f "%M" -o rss gem-eval "$url" --retry-for 1 >out 2>err; test $? = 2; } &&
	cat err rss && grep -q "68731011082 parameters (549.8 GB with their gradient)" err &&
	test "$(tail -1 rss)" -lt 100000 && test ! -s out &&
	{ /usr/bin/time -f "%M" -o rss gem-work -q --server "$url" --steps 1 --retry-for 1 2>err; \
		test $? = 1; } &&
	cat err rss && grep -q "68731011082 parameters (549.8 GB with their gradient)" err &&
	test "$(tail -1 rss)" -lt 100000
'

test_done
