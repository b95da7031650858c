#!/bin/bash
# t5700: a tiny gpt (d = 16, T = 16, one block) on a text written here, trained with AdamW, a
# warm-up, a cosine and clipping: run.json records them (and only them), gem-work --local
# resumes bit for bit, two gem workers against gem-serve are replayed bit for bit by gem-sim
# --replay, gem-sim trains it, and gem-eval reports bits per byte.
. "$(dirname "$0")/test-lib.sh"

# theta RUN: RUN's θ alone (params.gem's header holds the wall-clock elapsed)
theta() { tail -n +2 "$1/params.gem"; }
same() { theta "$1" >"$1.theta" && theta "$2" >"$2.theta" && cmp "$1.theta" "$2.theta"; }

ADAMW="--optimizer adamw --lr 3e-3 --warmup 10 --schedule cosine --clip 1 --weight-decay 0.1 --batch 8"

test_expect_success 'a text and a tiny gpt spec' '
	python3 -c "
import random
random.seed(5)
words = \"in the beginning god created the heaven and the earth and the earth was without form\".split()
print(\" \".join(random.choice(words) for _ in range(6000)))" >text.txt &&
	test $(wc -c <text.txt) -gt 20000 &&
	cat >gpt16.json <<-\EOF
	{"name": "gpt16", "input": [16], "classes": 256, "layers": [
	 {"type": "embedding", "vocab": 256, "dim": 16}, {"type": "position"},
	 {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "attention", "heads": 2}]},
	 {"type": "residual", "layers": [{"type": "layernorm"}, {"type": "dense", "out": 64, "init_std": 0.02},
	  {"type": "gelu"}, {"type": "dense", "out": 16, "init_std": 0.02}]},
	 {"type": "layernorm"}, {"type": "dense", "out": 256, "init_std": 0.02}, {"type": "logsoftmax"}]}
	EOF
'

test_expect_success 'gem-init records the optimiser in run.json' '
	gem-init -q --model gpt16.json --data text:text.txt $ADAMW local &&
	grep -q "\"optimizer\": \"adamw\"" local/run.json && grep -q "\"warmup\": 10" local/run.json &&
	grep -q "\"schedule\": \"cosine\"" local/run.json && grep -q "\"clip\": 1" local/run.json &&
	grep -q "\"momentum\": 0" local/run.json
'

test_expect_success 'a run with the default optimiser has none of its members' '
	gem-init -q --model gpt16.json --data text:text.txt plain &&
	! grep -q "optimizer\|warmup\|schedule\|clip" plain/run.json
'

for bad in "--optimizer adam" "--optimizer adamw --momentum 0.9" "--optimizer adamw --nesterov" \
	   "--schedule linear" "--warmup -1" "--clip -1" "--schedule cosine --warmup 100000"; do
	test_expect_code 2 "gem-init refuses $bad" "
		gem-init --model gpt16.json --data text:text.txt $bad bad 2>err; rc=\$?; cat err;
		test ! -e bad && exit \$rc
	"
done

test_expect_success 'a run.json with a bad optimiser is refused where it is opened' '
	cp -r local hand &&
	sed -i "s/\"adamw\"/\"adam\"/" hand/run.json &&
	{ gem-work -q --local hand 2>err; test $? = 2; } && grep -q "train.optimizer" err
'

test_expect_success 'gem-work --local with AdamW resumes bit for bit (the moments saved)' '
	cp -r local split &&
	gem-work -q --local local &&
	gem-work -q --steps 57 --local split && test -s split/local-state.gem &&
	gem-work -q --local split &&
	same local split
'

test_expect_success 'two gem workers against gem-serve, replayed bit for bit' '
	gem-init -q --model gpt16.json --data text:text.txt $ADAMW --workers 2 served &&
	start_server served &&
	pids= &&
	for i in 1 2; do
		gem-work -q --server "$URL" --steps 40 2>>served/work.err &
		pids="$pids $!"
	done &&
	for p in $pids; do wait_exit $p 120 || exit 1; done &&
	wait_exit $SERVER_PID 30 &&
	test $(grep -c "\"loss\"" served/log.jsonl) = 80 &&
	gem-sim -q --replay served/log.jsonl replayed >replay.tsv &&
	same served replayed
'

test_expect_success 'gem-eval: bits per byte and next-byte accuracy on the held-out text' '
	gem-eval served local >eval.tsv && cat eval.tsv &&
	head -1 eval.tsv | grep -q "test_bpb	test_acc" &&
	awk "NR > 1 { if (!(\$5 > 0.5 && \$5 < 8 && \$6 > 0.05 && \$6 <= 1)) exit 1 } END { exit NR != 3 }" eval.tsv &&
	gem-eval --json --train-subset 10 local | grep -q "\"train_bpb\":"
'

test_expect_success 'training lowers the held-out bits per byte' '
	gem-eval plain >before.tsv &&
	awk "NR == 2 { print \$4 }" before.tsv >b && awk "NR == 3 { print \$5 }" eval.tsv >a &&
	awk -v b="$(cat b)" -v a="$(cat a)" "BEGIN { exit !(a < b - 1) }"
'

test_expect_success 'gem-sim trains it with 3 workers, the same twice' '
	gem-sim -q -n 3 --steps 20 --model gpt16.json --data text:text.txt $ADAMW sim1 >sim1.tsv &&
	gem-sim -q -n 3 --steps 20 --model gpt16.json --data text:text.txt $ADAMW sim2 >sim2.tsv &&
	same sim1 sim2 && gem-eval sim1 | awk "NR == 2 { exit !(\$4 < 8) }"
'

test_done
