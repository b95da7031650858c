#!/bin/bash
# t5502: one test of divergence everywhere (a loss that is not finite, or over 100 times a
# uniform guess's): gem-sim and gem-eval warn and exit 1, a loss that blew up but stayed finite
# is caught too, numbers that are not finite read nan or inf (never -nan), and a column that
# does not apply to the rule reads "-".
. "$(dirname "$0")/test-lib.sh"

DIVERGES="--model tiny.json --data data --batch 32 --rule downpour --seed 3"

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success 'gem-sim: a loss that blows up (finite) stops its workers; warned, exit 1, the run ends diverged' '
	{ gem-sim -n 3 --steps 20 $DIVERGES --lr 1000 sim >out 2>err; rc=$?; } ; cat out err &&
	test $rc = 1 &&
	grep -q "^gem-sim: warning: worker [0-9]*: the loss is [0-9.e+]* at version [0-9]*: diverged$" err &&
	test "$(grep -c "the loss is" err)" = 1 &&
	grep -q "^gem-sim: warning: the run diverged (3 workers'"'"' loss did)" err &&
	awk -F "\t" "NR == 2 { exit !(\$10 == 3) }" out &&
	tail -2 sim/log.jsonl | head -1 | grep -q "\"event\":\"end\".*\"how\":\"diverged\",\"loss\":[0-9]" &&
	{ gem-serve --check sim 2>err; test $? = 2; } && grep -q "diverged at version" err
'

test_expect_success 'gem-sim: a rule without pi statistics has "-" in their columns, not nan' '
	gem-sim -n 2 --steps 5 $DIVERGES --lr 0.1 fine >out 2>err && cat out &&
	awk -F "\t" "NR == 2 { exit !(\$8 == \"-\" && \$9 == \"-\" && \$12 == \"-\") }" out &&
	! grep -qi "nan" out &&
	gem-sim -n 2 --steps 5 --model tiny.json --data data --batch 32 --seed 3 gemrun >out 2>err &&
	awk -F "\t" "NR == 2 { exit !(\$8 != \"-\" && \$8 + 0 == \$8) }" out
'

test_expect_success 'gem-eval of parameters that blew up: nan (not -nan), a warning, exit 1' '
	# every parameter 1e30: the logits overflow, the loss is not a number
	gem-init -q --model tiny.json --data data blown &&
	python3 "$GEM_SRC/t/gem-msg.py" --count 1108 --value 1e30 --blob-name params --seal >blown/params.gem &&
	{ gem-eval blown >out 2>err; test $? = 1; } && cat out err &&
	awk -F "\t" "NR == 2 { exit !(\$4 == \"nan\") }" out && ! grep -q -- "-nan" out &&
	grep -q "^gem-eval: warning: blown: the test loss is nan at version 0: the parameters have diverged$" err &&
	# a finite loss that blew up is said too
	{ gem-run -q -n 1 $DIVERGES --lr 1000 div >/dev/null 2>&1; test $? = 1; } &&
	{ gem-eval div >out 2>err; test $? = 1; } && cat out err &&
	grep -q "^gem-eval: warning: div: the test loss is [0-9.e+]* at version" err &&
	# several runs: every line printed, the one that diverged named, exit 1
	{ gem-eval fine blown fine >out 2>err; test $? = 1; } && test $(grep -vc "^#" out) = 3 &&
	test "$(grep -c warning err)" = 1 && grep -q "warning: blown:" err &&
	gem-eval fine >/dev/null
'

test_done
