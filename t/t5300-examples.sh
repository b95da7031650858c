#!/bin/bash
# t5300: the example scripts of share/gem/examples run end to end on the tiny model: local.sh
# with two workers, ssh.sh with a fake ssh that runs the command here, slurm.sh with a fake
# srun that starts its tasks here, compare.sh with two rules at one and two workers.
. "$(dirname "$0")/test-lib.sh"

EX="$GEM_SHARE_DIR/examples"
TINY="--model tiny.json --data data --epochs 1 --batch 32 --lr 0.1 --seed 3"

# eval_ok FILE: gem-eval's TSV of a run that learnt the tiny task (one epoch of 2000
# samples per worker, 63 updates each).
eval_ok() {
	head -1 "$1" | grep -q '^# elapsed	version	samples	test_loss	test_acc	bytes$' &&
	awk -v v="$2" 'NR == 2 && $2 == v && $5 > 0.8 { ok = 1 } END { exit !(ok && NR == 2) }' "$1"
}

test_expect_success 'setup: tiny data, fake ssh, srun and scontrol' '
	make_tiny_data data &&
	make_fake_ssh fakebin &&
	cat >fakebin/srun <<-\EOF &&
	#!/bin/sh
	# fake srun: start SLURM_NTASKS copies of the command here, SLURM_PROCID 0, 1, ...
	while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
	i=0 pids=
	while [ $i -lt "$SLURM_NTASKS" ]; do
		SLURM_PROCID=$i "$@" & pids="$pids $!"
		i=$((i + 1))
	done
	st=0
	for p in $pids; do wait $p || st=1; done
	exit $st
	EOF
	cat >fakebin/scontrol <<-\EOF &&
	#!/bin/sh
	# fake scontrol: show hostnames of a comma-separated list without ranges
	[ "$1 $2" = "show hostnames" ] && echo "$3" | tr , "\n"
	EOF
	chmod +x fakebin/* &&
	FAKE_SSH_LOG=$PWD/ssh.log && export FAKE_SSH_LOG
'

for ex in local ssh slurm compare; do
	test_expect_success "$ex.sh: a header comment, set -eu, valid sh" "
		sed -n 2,6p '$EX/$ex.sh' | grep -q '^# $ex.sh: ' &&
		grep -q '^set -eu$' '$EX/$ex.sh' &&
		sh -n '$EX/$ex.sh' && test -x '$EX/$ex.sh'
	"
	test_expect_code 2 "$ex.sh without arguments: usage, exit 2" "
		sh '$EX/$ex.sh' 2>err; rc=\$?; grep -q '^usage: ' err; exit \$rc
	"
done

test_expect_code 2 'local.sh: N must be a positive integer' '
	sh "$EX/local.sh" two run $TINY
'

test_expect_success 'local.sh: 2 workers train the tiny model' '
	sh "$EX/local.sh" 2 run-local $TINY >eval.tsv &&
	cat eval.tsv && eval_ok eval.tsv 126 &&
	test -f run-local/worker-0.log && test -f run-local/worker-1.log &&
	grep -q "\"nworkers\": 2" run-local/run.json
'

test_expect_success 'ssh.sh: 2 hosts, one with 2 slots, reached over (fake) ssh' '
	printf "# the hosts\nnodeA 2\n\nnodeB\n" >hosts &&
	: >ssh.log &&
	PATH="$PWD/fakebin:$PATH" GEM_HOST=127.0.0.1 sh "$EX/ssh.sh" hosts run-ssh $TINY >eval.tsv &&
	cat eval.tsv && eval_ok eval.tsv 189 &&
	printf "nodeA\nnodeA\nnodeB\n" >ssh.want && sort ssh.log | diff ssh.want - &&
	test "$(stat -c %a run-ssh/token)" = 600 &&
	test $(grep -c "\"event\":\"join\"" run-ssh/log.jsonl) = 3
'

test_expect_code 2 'ssh.sh: a hosts file without hosts is bad usage' '
	echo "# nobody" >nohosts && sh "$EX/ssh.sh" nohosts run-none $TINY
'

test_expect_success 'slurm.sh: 3 tasks (1 server, 2 workers) under a fake srun' '
	PATH="$PWD/fakebin:$PATH" SLURM_NTASKS=3 SLURM_JOB_ID=42 SLURM_JOB_NODELIST=localhost \
		sh "$EX/slurm.sh" run-slurm $TINY >eval.tsv &&
	cat eval.tsv && eval_ok eval.tsv 126 &&
	test -f run-slurm/task-0.log && test -f run-slurm/task-2.log &&
	grep -q "\"nworkers\": 2" run-slurm/run.json
'

test_expect_success 'slurm.sh: worker tasks 1 and 2 are workers 0 and 1' '
	grep "\"event\":\"join\"" run-slurm/log.jsonl >joins &&
	grep -q "\"worker\":0" joins && grep -q "\"worker\":1" joins
'

test_expect_success 'slurm.sh again on the same RUNDIR: continues the run (a resubmission)' '
	PATH="$PWD/fakebin:$PATH" SLURM_NTASKS=3 SLURM_JOB_ID=43 SLURM_JOB_NODELIST=localhost \
		sh "$EX/slurm.sh" run-slurm $TINY --epochs 2 >eval2.tsv 2>err2 &&
	cat err2 eval2.tsv && grep -q "continuing it" err2 &&
	eval_ok eval2.tsv 126 &&
	test $(grep -c "\"event\":\"start\"" run-slurm/log.jsonl) = 2
'

test_expect_code 2 'slurm.sh outside Slurm is bad usage' '
	unset SLURM_NTASKS; sh "$EX/slurm.sh" run-x $TINY
'

# gem-serve stops as soon as the workers that have joined are done: a worker of gem-run
# that joins late (a loaded machine) would find it gone, so gem-run's workers are slowed
# down until the tiny epoch lasts about a second.
for runner in gem-run gem-sim; do
	command -v $runner >/dev/null || continue
	extra=
	[ $runner = gem-run ] && extra=--work-opt=--slowdown=20
	test_expect_success "compare.sh with $runner: 2 rules at 1 and 2 workers, one PNG" "
		GEM_RUNNER=$runner sh '$EX/compare.sh' cmp-$runner gem,downpour '1 2' \$TINY $extra >cmp.tsv &&
		cat cmp.tsv &&
		head -1 cmp.tsv | grep -q '^# rule	workers	elapsed	version	samples	test_loss	test_acc' &&
		awk '!/^#/ { n++; if (\$7 <= 0.8) bad++ } END { exit !(n == 4 && !bad) }' cmp.tsv &&
		test -f cmp-$runner/gem-1workers/log.jsonl &&
		test -f cmp-$runner/gem-2workers/log.jsonl &&
		test -f cmp-$runner/downpour-1workers/log.jsonl &&
		test -f cmp-$runner/downpour-2workers/log.jsonl &&
		test \"\$(head -c 8 cmp-$runner/loss.png | od -An -tx1 | tr -d ' \n')\" = 89504e470d0a1a0a &&
		test \$(grep -c '^# run: ' cmp-$runner/loss.gp) = 4
	"
done

test_expect_success 'compare.sh again replaces the runs' '
	GEM_RUNNER=gem-run sh "$EX/compare.sh" cmp-gem-run gem 1 $TINY >cmp2.tsv &&
	test $(grep -vc "^#" cmp2.tsv) = 1
'

test_done
