#!/bin/bash
# t6011: messages say what they mean: a server on every address prints and writes a URL others
# can reach (not 0.0.0.0), --public --no-token is warned about, "1 worker" and "1 update"
# (not "1 workers"), a RUNDIR given with a trailing slash gives paths with one slash, and one
# exit status per kind of refusal (a run in use, data that does not fit the model: 2).
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

# narrow_data DIR: an IDX dataset of 4x8 images (32 values), which tiny.json (64 inputs) does
# not fit.
narrow_data() {
	python3 - "$1" <<-\PY
	import gzip, struct, sys, os
	d = sys.argv[1]; os.makedirs(d, exist_ok=True)
	for split, n in (("train", 40), ("t10k", 20)):
	    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz", "wb") as f:
	        f.write(struct.pack(">IIII", 0x803, n, 4, 8) + bytes(32 * n))
	    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
	        f.write(struct.pack(">II", 0x801, n) + bytes(n))
	PY
}

test_expect_success 'one exit status per kind: a run in use, data that does not fit: 2 from each' '
	gem-init -q --model tiny.json --data data busy &&
	start_server busy && test_when_finished "stop_if_running $SERVER_PID" &&
	for cmd in "gem-serve --listen 127.0.0.1:0" "gem-init -q -f --model tiny.json --data data" \
		"gem-work -q --local"; do
		{ $cmd busy 2>err; rc=$?; } ; echo "$cmd: exit $rc" && cat err &&
		test $rc = 2 && grep -q "in use" err || return 1
	done &&
	narrow_data narrow &&
	{ gem-init -q --model tiny.json --data narrow nofit 2>err; test $? = 2; } &&
	grep -q "does not fit the model" err &&
	{ gem-eval --data narrow busy 2>err; test $? = 2; } && cat err && grep -q "does not fit the model" err &&
	cp -r data moved && gem-init -q --model tiny.json --data "$PWD/moved" fits &&
	rm -rf moved && cp -r narrow moved &&
	{ gem-work -q --local fits 2>err; test $? = 2; } && cat err && grep -q "does not fit the model" err
'

test_expect_success 'gem-work --local -t 5 RUNDIR: options in any order; a word left over named' '
	gem-work -q --local -t 2 run && gem-work -q -t 2 --local run && gem-work -q --local run -t 2 &&
	test "$(python3 "$GEM_SRC/t/gem-theta.py" run | wc -c)" -gt 0 &&
	{ gem-work -q --local -t 2 2>err; test $? = 2; } && grep -q "^gem-work: --local: which RUNDIR?$" err &&
	{ gem-work -q --local run 5 2>err; test $? = 2; } && cat err &&
	grep -q "^gem-work: unexpected argument (the options.* values follow them: --local RUNDIR, --steps S, ...): 5$" err
'

test_expect_success 'gem-init --model mpl: did you mean mlp (one swap), not gpt' '
	{ gem-init -q --model mpl r-mpl 2>err; test $? = 2; } && cat err &&
	grep -q "unknown model \"mpl\" (did you mean mlp?)" err
'

test_expect_success '--data FILE without its format: the prefix its name suggests' '
	printf "a,label\n1,0\n2,1\n" >t.csv && : >x.npy && : >d.npz && : >notes.dat &&
	{ gem-init -q --model tiny.json --data t.csv r-csv 2>err; test $? = 2; } && cat err &&
	grep -q "t.csv: a file, not a dataset directory; did you mean --data csv:t.csv --label COLUMN?" err &&
	{ gem-init -q --model tiny.json --data ./x.npy r-npy 2>err; test $? = 2; } && cat err &&
	grep -q "did you mean --data npy:./x.npy,LABELS.npy?" err &&
	{ gem-init -q --model tiny.json --data "$PWD/d.npz" r-npz 2>err; test $? = 2; } &&
	grep -q "did you mean --data npz:$PWD/d.npz?" err &&
	{ gem-init -q --model tiny.json --data notes.dat r-dat 2>err; test $? = 2; } && cat err &&
	grep -q "notes.dat: a file, not a dataset directory: name its format, --data csv:FILE" err &&
	test ! -e r-csv && test ! -e r-dat
'

test_expect_success 'gem-eval of a run without a log: bytes 0, nothing on stderr, no //' '
	gem-init -q --model tiny.json --data data nolog &&
	gem-eval nolog/ >out 2>err && cat out err && test ! -s err &&
	tail -1 out | awk -F"\t" "{ exit !(\$6 == \"0\") }" &&
	gem-eval --json nolog/ >out 2>err && test ! -s err && grep -q "\"bytes\":0}" out
'

test_done
