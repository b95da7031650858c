#!/bin/bash
# t5000: gem-init makes a run, gem-work --local trains it, gem-eval evaluates it, on a small
# synthetic IDX dataset (make_tiny_data; the real one is used by t5001).
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'make a tiny dataset' 'make_tiny_data data/quarters'

test_expect_success 'gem-init makes a run' '
	gem-init --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 run &&
	test -f run/run.json && test -f run/params.gem &&
	grep -q "\"lr\": 0.1" run/run.json && grep -q "\"name\": \"gem\"" run/run.json
'

test_expect_code 2 'gem-init refuses to overwrite a run' '
	gem-init --model tiny.json --data data/quarters run
'

test_expect_success 'gem-init --force replaces it' '
	gem-init --force --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 run
'

test_expect_success 'gem-init makes the parents of RUNDIR' '
	gem-init -q --model tiny.json --data data/quarters a/b/c &&
	test -f a/b/c/run.json && test -f a/b/c/params.gem
'

test_expect_success 'gem-init --force refuses a run in use, naming the holder, and touches nothing' '
	gem-init -q --model tiny.json --data data/quarters busy &&
	start_server busy --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	cp busy/run.json busy/params.gem . &&
	{ gem-init -f -q --model tiny.json --data data/quarters --seed 9 busy/ 2>err; rc=$?; } &&
	cat err && test $rc = 2 &&
	grep -q "in use by pid $SERVER_PID (gem-serve at $URL)" err &&
	! grep -q "busy//" err &&
	cmp run.json busy/run.json && cmp params.gem busy/params.gem &&
	test -s busy/log.jsonl && test "$(cat busy/server.url)" = "$URL" &&
	stop_server
'

test_expect_success 'gem-init --force removes every file the old run left' '
	for f in log.jsonl local-state.gem rule-state.gem local-state.prev.gem rule-state.prev.gem \
		params.prev.gem \
		server.url peers serve.err worker-0.log \
		node-0.gem node-1.jsonl node-0.url node-0.log; do echo old >busy/$f || return 1; done &&
	echo mine >busy/notes.txt &&
	gem-init -f -q --model tiny.json --data data/quarters busy &&
	ls -A busy | sort >files && printf "%s\n" .lock notes.txt params.gem run.json >want &&
	diff want files
'

test_expect_success 'the same seed gives the same initial parameters' '
	gem-init -q --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 run2 &&
	cmp run/params.gem run2/params.gem &&
	gem-init -q --model tiny.json --data data/quarters --seed 4 run3 &&
	! cmp -s run/params.gem run3/params.gem
'

test_expect_success 'the params file starts with a JSON line' '
	head -1 run/params.gem | python3 -c "import json,sys; h=json.load(sys.stdin); assert h[\"version\"]==0, h"
'

test_expect_success 'an untrained model is near chance (loss near ln 4)' '
	gem-eval run >eval0.tsv &&
	head -1 eval0.tsv | grep -q "^# elapsed	version	samples	test_loss	test_acc	bytes$" &&
	awk "NR==2 { exit !(\$2 == 0 && \$4 > 1.1 && \$4 < 1.7) }" eval0.tsv
'

test_expect_success 'gem-work --local trains two epochs' '
	gem-work --local run --epochs 2 -q &&
	test $(grep -vc "\"event\"" run/log.jsonl) = 126 &&
	tail -1 run/log.jsonl | python3 -c "import json,sys; r=json.load(sys.stdin); assert r[\"version\"]==126 and r[\"samples\"]==4000, r"
'

test_expect_success 'the trained model is much better than chance' '
	gem-eval run >eval1.tsv &&
	awk "NR==2 { exit !(\$2 == 126 && \$3 == 4000 && \$4 < 0.3 && \$5 > 0.9) }" eval1.tsv
'

test_expect_success 'gem-eval --json prints one JSON object' '
	gem-eval --json run | python3 -c "import json,sys; r=json.load(sys.stdin); assert r[\"version\"]==126, r"
'

test_expect_success 'gem-eval takes a params file' '
	cp run/params.gem run/copy.gem && gem-eval run/copy.gem >eval2.tsv && cmp eval1.tsv eval2.tsv
'

test_expect_success 'training resumes: 1+1 epochs equal 2 epochs in version and samples' '
	gem-init -q --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 --epochs 2 r2 &&
	gem-work -q --local r2 --epochs 1 && gem-work -q --local r2 &&
	gem-eval r2 | awk "NR==2 { exit !(\$2 == 126 && \$3 == 4000) }"
'

test_expect_success 'a spent budget trains nothing' '
	gem-work --local r2 2>err && grep -q "budget" err &&
	test $(grep -vc "\"event\"" r2/log.jsonl) = 126
'

test_expect_success '--steps trains that many updates' '
	gem-work -q --local r2 --steps 5 && test $(grep -vc "\"event\"" r2/log.jsonl) = 131
'

test_expect_success 'the same seed gives the same trained parameters' '
	gem-init -q --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 a &&
	gem-init -q --model tiny.json --data data/quarters --lr 0.1 --batch 32 --seed 3 b &&
	gem-work -q --local a --steps 40 && gem-work -q --local b --steps 40 &&
	tail -c +$(( $(head -1 a/params.gem | wc -c) + 1 )) a/params.gem >a.blob &&
	tail -c +$(( $(head -1 b/params.gem | wc -c) + 1 )) b/params.gem >b.blob &&
	cmp a.blob b.blob
'
test_expect_success 'a run stopped and resumed is bit for bit the run left alone' '
	cat >drop.json <<-\JSON &&
	{"name":"drop","input":[64],"classes":4,"layers":[
	 {"type":"dense","out":16},{"type":"relu"},{"type":"dropout","p":0.3},{"type":"dense","out":4},
	 {"type":"logsoftmax"}]}
	JSON
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 whole &&
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 parts &&
	gem-work -q --local whole --steps 100 &&
	gem-work -q --local parts --steps 37 && gem-work -q --local parts --steps 63 &&
	tail -c +$(( $(head -1 whole/params.gem | wc -c) + 1 )) whole/params.gem >w.blob &&
	tail -c +$(( $(head -1 parts/params.gem | wc -c) + 1 )) parts/params.gem >p.blob &&
	cmp w.blob p.blob
'

# The threads split outputs, not sums: two threads give one thread's θ and evaluation.
test_expect_success '--threads 2: the θ and the evaluation of one thread' '
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 th &&
	gem-work -q --local th --steps 100 --threads 2 &&
	tail -c +$(( $(head -1 th/params.gem | wc -c) + 1 )) th/params.gem >t.blob &&
	cmp w.blob t.blob &&
	gem-eval --threads 2 th >te.tsv &&
	gem-eval th | cmp - te.tsv
'

# Micro-batches are recorded in run.json (only when asked for) and, like the threads' split,
# give θ whatever --threads is; a dropout model draws other masks than the whole batch does.
test_expect_success '--microbatches 2: recorded, and the θ of one thread on two' '
	! grep -q microbatches th/run.json &&
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 --microbatches 2 mb1 &&
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 --microbatches 2 mb2 &&
	grep -q "^    \"microbatches\": 2,\{0,1\}$" mb1/run.json &&
	gem-work -q --local mb1 --steps 100 &&
	gem-work -q --local mb2 --steps 100 --threads 2 &&
	tail -c +$(( $(head -1 mb1/params.gem | wc -c) + 1 )) mb1/params.gem >m1.blob &&
	tail -c +$(( $(head -1 mb2/params.gem | wc -c) + 1 )) mb2/params.gem >m2.blob &&
	cmp m1.blob m2.blob && ! cmp -s m1.blob w.blob
'

test_expect_success '--microbatches out of range, beyond the batch or in run.json: refused' '
	{ gem-init -q --model drop.json --data data/quarters --batch 32 --microbatches 0 x 2>err; test $? = 2; } &&
	grep -q "^gem-init: --microbatches: not an integer in \[1, 64\]: 0$" err &&
	{ gem-init -q --model drop.json --data data/quarters --batch 32 --microbatches 33 x 2>err; test $? = 2; } &&
	grep -q "^gem-init: --microbatches 33: more than the batch (32)$" err && test ! -e x &&
	cp -r mb1 mbbad && sed "s/\"microbatches\": 2/\"microbatches\": 64/" mb1/run.json >mbbad/run.json &&
	{ gem-work -q --local mbbad --steps 1 2>err; test $? = 2; } &&
	grep -q "train.microbatches: not an integer in \[1, 64\] and at most the batch" err
'

test_expect_success '--threads beyond the pool'"'"'s 64 is refused, not cut' '
	{ gem-work -q --local th --steps 1 --threads 65 2>err; test $? = 2; } &&
	grep -q "^gem-work: --threads: not an integer in \[1, 64\]: 65$" err &&
	{ gem-eval --threads 65 th 2>err; test $? = 2; } &&
	grep -q "^gem-eval: --threads: not an integer in \[1, 64\]: 65$" err
'

# local-state.gem holds θ with its momentum and is written before params.gem: a kill between
# the two, even twice in a row, resumes from it, and the run is the run left alone.
test_expect_success 'kills between a save'"'"'s state and θ lose nothing, bit for bit' '
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 crash &&
	gem-work -q --local crash --steps 37 && cp crash/params.gem p37 &&
	gem-work -q --local crash --steps 20 &&
	cp p37 crash/params.gem &&
	gem-work -q --local crash --steps 20 2>err && ! grep -q "momentum starts at 0" err &&
	head -1 crash/params.gem | grep -q "\"version\":77," &&
	cp p37 crash/params.gem &&
	gem-work -q --local crash --steps 23 &&
	head -1 crash/params.gem | grep -q "\"version\":100," &&
	tail -c +$(( $(head -1 crash/params.gem | wc -c) + 1 )) crash/params.gem >c.blob &&
	cmp w.blob c.blob
'

test_expect_success 'without its optimiser state the resumed run differs (the test can fail)' '
	gem-init -q --model drop.json --data data/quarters --lr 0.1 --batch 32 --seed 9 lost &&
	gem-work -q --local lost --steps 37 && rm lost/local-state.gem &&
	gem-work -q --local lost --steps 63 2>err && grep -q "momentum starts at 0" err &&
	tail -c +$(( $(head -1 lost/params.gem | wc -c) + 1 )) lost/params.gem >l.blob &&
	! cmp -s w.blob l.blob
'
test_done
