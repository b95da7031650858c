#!/bin/bash
# t5001: a real (short) training run on Fashion-MNIST: mlp, one epoch, local momentum SGD.
. "$(dirname "$0")/test-lib.sh"
test_have_dataset

test_expect_success 'gem-init records the training set statistics' '
	gem-init -q --model mlp --lr 0.05 --momentum 0.9 --batch 64 --seed 1 run &&
	python3 -c "
import json; r = json.load(open(\"run/run.json\"))
assert abs(r[\"data\"][\"mean\"] - 0.2860) < 1e-3 and abs(r[\"data\"][\"std\"] - 0.3530) < 1e-3, r[\"data\"]
assert r[\"nparams\"] == 784*256 + 256 + 256*10 + 10, r[\"nparams\"]"
'

test_expect_success 'one epoch of mlp reaches over 80% test accuracy' '
	gem-work -q --local run --epochs 1 &&
	gem-eval run >eval.tsv && cat eval.tsv &&
	awk "NR==2 { exit !(\$2 == 938 && \$3 == 60000 && \$5 > 0.80) }" eval.tsv
'

test_expect_success 'the cnn model initialises and takes steps' '
	gem-init -q --model cnn --seed 1 cnn &&
	gem-work -q --local cnn --steps 30 &&
	test $(grep -vc "\"event\"" cnn/log.jsonl) = 30
'
test_done
