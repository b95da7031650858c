#!/bin/bash
# t5504: async-diloco's defaults train. With --workers N, gem-init gives async-diloco the outer
# rate 0.7/N and delayed Nesterov over N arrivals (doc/results.md, "Low communication": the
# setting that matched sync), stored in run.json; with them 4 virtual workers train the mlp on
# Fashion-MNIST to within noise of sync at the same samples, where DiLoCo's 0.7 without delayed
# Nesterov diverges, and the divergence's message names the options of the rule's outer step.
# gem-sim: deterministic, a few seconds.
. "$(dirname "$0")/test-lib.sh"
test_have_dataset

# acc RUNDIR: the test accuracy of the run's final θ.
acc() { gem-eval "$1" | tail -1 | cut -f5; }

test_expect_success 'gem-init --workers 4: outer lr 0.175, delayed Nesterov 4 in run.json' '
	gem-init -q -n 4 -m mlp --rule async-diloco --window 20 r &&
	python3 -c "import json; r = json.load(open(\"r/run.json\"))[\"rule\"]; \
		assert abs(r[\"outer_lr\"] - 0.175) < 1e-7 and r[\"delayed_nesterov\"] == 4, r"
'

test_expect_success 'options given win; --fragments keeps delayed Nesterov off (they do not mix)' '
	gem-init -q -n 4 -m mlp --rule async-diloco --window 20 --outer-lr 0.3 --delayed-nesterov 2 g &&
	gem-init -q -n 4 -m mlp --rule async-diloco --window 20 --fragments 2 f &&
	gem-init -q -m mlp --rule async-diloco --window 20 one &&
	python3 - <<-\PY
	import json
	g, f, one = (json.load(open(d + "/run.json"))["rule"] for d in ("g", "f", "one"))
	assert abs(g["outer_lr"] - 0.3) < 1e-7 and g["delayed_nesterov"] == 2, g
	assert abs(f["outer_lr"] - 0.175) < 1e-7 and f["delayed_nesterov"] == 0, f
	assert abs(one["outer_lr"] - 0.7) < 1e-7 and one["delayed_nesterov"] == 0, one
	PY
'

test_expect_success 'the defaults at N = 4 train to within noise of sync (100 steps each)' '
	gem-sim -q -n 4 -t 100 -m mlp --rule sync s >/dev/null &&
	gem-sim -q -n 4 -t 100 -m mlp --rule async-diloco --window 20 a >/dev/null &&
	s=$(acc s) && a=$(acc a) && echo "sync $s, async-diloco $a" &&
	awk -v s="$s" -v a="$a" "BEGIN { exit !(s > 0.75 && a > s - 0.03) }"
'

test_expect_code 1 'DiLoCo'"'"'s 0.7 without delayed Nesterov diverges; the message names the outer step' '
	gem-sim -q -n 4 -t 100 -m mlp --rule async-diloco --window 20 --outer-lr 0.7 \
		--delayed-nesterov 0 d >/dev/null 2>err; rc=$?; cat err;
	grep -q "the run diverged.*--outer-lr (at most 0.7/N for N workers), and --delayed-nesterov N" err &&
	exit $rc
'

test_expect_code 2 'resuming it is refused with the same options named' '
	gem-serve --check d 2>err; rc=$?; cat err;
	grep -q "diverged at version.*make the run again with a lower --lr or --outer-lr (at most 0.7/N" err &&
	exit $rc
'

test_done
