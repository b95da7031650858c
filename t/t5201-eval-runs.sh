#!/bin/bash
# t5201: gem-eval beyond one server run: several runs in one table, an SGP run evaluated by
# its nodes, and --follow of a local training's checkpoints until it ends.
. "$(dirname "$0")/test-lib.sh"

# versions FILE: the version column of gem-eval's TSV, one line.
versions() { awk -F"\t" '!/^#/ { printf "%s ", $2 }' "$1"; }

test_expect_success 'setup: two local runs, different lengths' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 a &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 4 b &&
	gem-work -q --local a --steps 10 && gem-work -q --local b --steps 20
'

test_expect_success 'one run: the table is as it was (no run column)' '
	gem-eval a >one.tsv &&
	head -1 one.tsv | grep -q "^# elapsed	version	samples	test_loss	test_acc	bytes$" &&
	test "$(wc -l <one.tsv)" = 2
'

test_expect_success 'several runs: one table, the run (as named) first, each line as alone' '
	gem-eval a b/ b/params.gem >many.tsv &&
	head -1 many.tsv | grep -q "^# run	elapsed	version	samples	test_loss	test_acc	bytes$" &&
	cut -f1 many.tsv | tail -3 | tr "\n" " " >got && printf "a b/ b/params.gem " >want &&
	diff want got &&
	sed -n 2p many.tsv | cut -f2- >got && tail -1 one.tsv >want && diff want got &&
	gem-eval b | tail -1 >want && sed -n 3p many.tsv | cut -f2- >got && diff want got &&
	gem-eval --json --train-subset 50 a b >many.json &&
	python3 -c "
import json
rows = [json.loads(l) for l in open(\"many.json\")]
assert [r[\"run\"] for r in rows] == [\"a\", \"b\"], rows
assert list(rows[0])[:3] == [\"run\", \"elapsed\", \"version\"] and \"train_loss\" in rows[0]
assert [r[\"version\"] for r in rows] == [10, 20], rows"
'

test_expect_code 2 'several runs, one of them not a run: exit 2, named' '
	mkdir -p empty && gem-eval a empty 2>err; rc=$?; grep -q "empty" err; exit $rc'

test_expect_success 'an SGP run: its nodes are evaluated, not its untrained params.gem' '
	gem-run -q -n 2 --rule sgp --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 sgp >run.out &&
	gem-eval sgp >auto.out 2>auto.err &&
	gem-eval --nodes sgp >nodes.out &&
	diff nodes.out auto.out &&
	grep -q "^average	" auto.out && grep -q "SGP run" auto.err &&
	! grep -q "^[0-9.]*	0	0	" auto.out
'

test_expect_code 2 'an SGP run with --per-class: exit 2, saying why' '
	gem-eval --per-class sgp 2>err; rc=$?; grep -q "SGP run" err; exit $rc'
test_expect_code 2 'an SGP run among several: exit 2' '
	gem-eval a sgp 2>err; rc=$?; grep -q "SGP run" err; exit $rc'
test_expect_code 2 '--follow of an SGP run: exit 2' '
	gem-eval --follow sgp 2>err; rc=$?; grep -q "SGP run" err; exit $rc'

test_expect_success '--follow RUNDIR of a local training: each checkpoint, then the end, exit 0' '
	cp a/params.gem p10.gem && cp b/params.gem p20.gem &&
	{ sleep 300 & } && spid=$! && test_bg $spid &&
	echo $spid >a/.lock &&
	{ gem-eval --follow a --interval 0.05 >fol.tsv 2>fol.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test \"\$(versions fol.tsv)\" = \"10 \"" &&
	cp p20.gem a/new.gem && mv a/new.gem a/params.gem &&
	wait_until "test \"\$(versions fol.tsv)\" = \"10 20 \"" &&
	kill -0 $fpid &&
	kill $spid && { wait $spid; true; } &&
	wait $fpid &&
	test "$(grep -c "^#" fol.tsv)" = 1 && ! test -s fol.err
'

test_expect_success '--follow RUNDIR while gem-work --local trains: ends with its last checkpoint' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 c &&
	{ gem-work -q --local c --steps 3000 --slowdown 20 --checkpoint-every 0.2 & } &&
	wpid=$! && test_bg $wpid &&
	wait_until "grep -q \"\\\"version\\\":1,\" c/log.jsonl 2>/dev/null" &&
	timeout 60 gem-eval --follow c --interval 0.1 >lf.tsv &&
	! kill -0 $wpid 2>/dev/null &&
	test "$(versions lf.tsv | awk "{ print \$NF }")" = 3000 &&
	python3 -c "
v = [int(l.split()[1]) for l in open(\"lf.tsv\") if not l.startswith(\"#\")]
assert all(a < b for a, b in zip(v, v[1:])), v"
'
test_done
