#!/bin/bash
# t5602: gem-init --init-from starts θ from a safetensors file: a run exported and a new run
# made from its file give the same gem-eval figures (the new one at version 0, the exported one
# at its end), on a dataset of its own test split and on a held-out one; a file of another model's shapes is refused with every
# mismatch named, and nothing is made; a file that is not there is named.
. "$(dirname "$0")/test-lib.sh"

# figures TSV: gem-eval's test_loss and test_acc of its last line.
figures() { tail -1 "$1" | cut -f4,5; }

test_expect_success 'setup: a tiny run trained 40 steps, exported' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --batch 32 run &&
	gem-work -q --local run --steps 40 &&
	gem-export -q run >run.safetensors
'

test_expect_success 'a run made --init-from the export evaluates as the exported run at its end' '
	gem-init -q --model tiny.json --data data --seed 9 --init-from run.safetensors new &&
	gem-eval run >a && gem-eval new >b && cat a b &&
	test "$(tail -1 b | cut -f2)" = 0 && test "$(tail -1 a | cut -f2)" = 40 &&
	test "$(figures a)" = "$(figures b)"
'

test_expect_success 'its θ₀ is the file'"'"'s tensors, bit for bit' '
	python3 "$GEM_SRC/t/gem-theta.py" run >a.bin && python3 "$GEM_SRC/t/gem-theta.py" new >b.bin &&
	cmp a.bin b.bin
'

test_expect_success 'the same with held-out data (one seed, one split)' '
	python3 "$GEM_SRC/t/gem-made-data.py" csv csv &&
	gem-init -q -m csv/model.json -d csv:csv/t.csv --label label --holdout 0.2 tab &&
	gem-work -q --local tab --steps 30 && gem-export -q tab >tab.safetensors &&
	gem-init -q -m csv/model.json -d csv:csv/t.csv --label label --holdout 0.2 \
		--init-from tab.safetensors tab3 &&
	gem-eval tab >a && gem-eval tab3 >b && cat a b && test "$(figures a)" = "$(figures b)"
'

test_expect_code 2 'another model'"'"'s file: every mismatch named, no run made' '
	sed "s/\"out\":16/\"out\":8/" tiny.json >small.json &&
	gem-init --model small.json --data data --init-from run.safetensors bad 2>err; rc=$?; cat err;
	grep -q "0.weight: shape \[16, 64\] in the file, \[8, 64\] in the model" err &&
	grep -q "0.bias" err && grep -q "2.weight" err &&
	test ! -e bad/run.json && exit $rc
'

test_expect_code 1 'a file that is not there is named' '
	gem-init --model tiny.json --data data --init-from nothing.safetensors bad 2>err; rc=$?; cat err;
	grep -q "init-from: nothing.safetensors" err && test ! -e bad/run.json && exit $rc
'

test_done
