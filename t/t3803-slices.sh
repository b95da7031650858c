#!/bin/bash
# t3803: sliced gem-serve (--slice I/K). With one worker (its commits serialised), a run served
# by K = 2 or 3 slices ends with the θ of the run served by one server, bit for bit, for every
# rule; kill -9 of one slice's server and a restart loses at most that slice's checkpoint
# interval while the other slice carries on. gem-sim --slices K gives the θ of one core.
. "$(dirname "$0")/test-lib.sh"

# theta RUN: θ as raw float32 (a sliced run's slices end to end)
theta() { python3 "$GEM_SRC/t/gem-theta.py" "$1"; }

# served RUN K STEPS: serve RUN with K slices (K = 0: one plain server), train one worker
served() {
	_run=$1 _k=$2 _steps=$3 _pids=
	if [ "$_k" = 0 ]; then
		gem-serve --listen 127.0.0.1:0 "$_run" >/dev/null 2>"$_run.serve.err" &
		_pids=$!
	else
		for _i in $(seq 0 $((_k - 1))); do
			gem-serve --listen 127.0.0.1:0 --slice "$_i/$_k" "$_run" >/dev/null \
				2>"$_run.serve$_i.err" &
			_pids="$_pids $!"
		done
	fi
	for _p in $_pids; do test_bg $_p; done
	gem-work -q --server "$_run" --steps "$_steps" --retry-for 20 2>"$_run.work.err" &&
	for _p in $_pids; do wait_exit $_p 30 || return 1; done
}

test_expect_success 'setup' '
	make_tiny_data data
'

# RULE K3 [gem-init options]: K3 = 3 also compares 3 slices ("-": not)
for spec in "gem 3" "downpour - --window 2" "dynsgd -" "easgd - --window 2" "dcasgd -" \
	    "sync -" "dma 3"; do
	set -- $spec
	rule=$1 k3=${2#-}
	shift 2
	test_expect_success "$rule: one worker, θ of K = 2${k3:+ and K = $k3} slices is θ of one server" "
		gem-init -q --model tiny.json --data data --rule $rule --workers 1 --lr 0.05 \
			--batch 16 --seed 4 $* $rule-1 &&
		cp -r $rule-1 $rule-2 && cp -r $rule-1 $rule-3 && theta $rule-1 >$rule-0.bin &&
		served $rule-1 0 12 && served $rule-2 2 12 &&
		theta $rule-1 >$rule-1.bin && theta $rule-2 >$rule-2.bin &&
		! cmp -s $rule-0.bin $rule-1.bin && cmp $rule-1.bin $rule-2.bin &&
		if [ -n \"$k3\" ]; then
			served $rule-3 3 12 && theta $rule-3 >$rule-3.bin && cmp $rule-1.bin $rule-3.bin
		fi
	"
done

test_expect_success 'gem-sim --slices 2 and 3, three workers: the θ of one core (gem, easgd, sync)' '
	for rule in gem easgd sync; do
		gem-init -q --model tiny.json --data data --rule $rule --workers 3 --lr 0.05 \
			--batch 16 --seed 5 sim-$rule-1 &&
		cp -r sim-$rule-1 sim-$rule-2 && cp -r sim-$rule-1 sim-$rule-3 && theta sim-$rule-1 >s0.bin &&
		gem-sim -q -n 3 --steps 6 --jitter 0.3 sim-$rule-1 >/dev/null &&
		gem-sim -q -n 3 --steps 6 --jitter 0.3 --slices 2 sim-$rule-2 >/dev/null &&
		gem-sim -q -n 3 --steps 6 --jitter 0.3 --slices 3 sim-$rule-3 >/dev/null &&
		test -d sim-$rule-3/slice-2-of-3 &&
		theta sim-$rule-1 >s1.bin && theta sim-$rule-2 >s2.bin && theta sim-$rule-3 >s3.bin &&
		! cmp -s s0.bin s1.bin &&
		cmp s1.bin s2.bin && cmp s1.bin s3.bin || return 1
	done
'

test_expect_success 'each slice has its own version, log and checkpoint; gem-eval sees the whole θ' '
	for i in 0 1; do
		test -s gem-2/slice-$i-of-2/log.jsonl &&
		head -1 gem-2/slice-$i-of-2/params.gem | grep -q "\"version\":12" &&
		head -1 gem-2/slice-$i-of-2/rule-state.gem | grep -q "\"version\":12" &&
		grep -q "\"slice\":{\"i\":$i,\"k\":2" gem-2/slice-$i-of-2/log.jsonl || return 1
	done &&
	gem-eval gem-1 | tail -1 | cut -f2-5 >e1 && gem-eval gem-2 | tail -1 | cut -f2-5 >e2 && cmp e1 e2 &&
	{ gem-serve --listen 127.0.0.1:0 gem-2 2>err; test $? = 2; } && grep -q "served by 2 slices" err &&
	{ gem-serve --listen 127.0.0.1:0 --slice 0/3 gem-2 2>err; test $? = 2; } &&
	grep -q "served by 2 slices" err
'

test_expect_success 'a worker refuses servers given out of slice order' '
	gem-init -q --model tiny.json --data data --seed 4 order &&
	{ gem-serve --listen 127.0.0.1:0 --slice 0/2 --keep-running order >/dev/null 2>&1 & p0=$!; } &&
	{ gem-serve --listen 127.0.0.1:0 --slice 1/2 --keep-running order >/dev/null 2>&1 & p1=$!; } &&
	test_bg $p0 && test_bg $p1 &&
	wait_for_file order/slice-0-of-2/server.url 20 && wait_for_file order/slice-1-of-2/server.url 20 &&
	u0=$(cat order/slice-0-of-2/server.url) && u1=$(cat order/slice-1-of-2/server.url) &&
	{ gem-work -q --server "$u1,$u0" --steps 1 --retry-for 2 2>err; test $? = 1; } &&
	grep -q "serves slice 1/2 of θ (offset [0-9]*, length [0-9]*), not 0/2" err &&
	kill $p0 $p1
'

test_expect_success 'gem-eval URL0,URL1: the whole θ of the slices in order; one slice, or out of order: 2' '
	gem-init -q --model tiny.json --data data --seed 4 --workers 1 urls &&
	{ gem-serve --listen 127.0.0.1:0 --slice 0/2 --keep-running urls >/dev/null 2>&1 & p0=$!; } &&
	{ gem-serve --listen 127.0.0.1:0 --slice 1/2 --keep-running urls >/dev/null 2>&1 & p1=$!; } &&
	test_bg $p0 && test_bg $p1 &&
	test_when_finished "kill $p0 $p1 2>/dev/null; true" &&
	wait_for_file urls/slice-0-of-2/server.url 20 && wait_for_file urls/slice-1-of-2/server.url 20 &&
	u0=$(cat urls/slice-0-of-2/server.url) && u1=$(cat urls/slice-1-of-2/server.url) &&
	gem-work -q --server urls --steps 7 &&
	gem-eval "$u0,$u1" | tail -1 | cut -f2-5 >eu && cat eu &&
	grep -q "^7	" eu &&
	curl -sf -X POST "$u0/v1/checkpoint" >/dev/null && curl -sf -X POST "$u1/v1/checkpoint" >/dev/null &&
	gem-eval urls | tail -1 | cut -f2-5 >ed && cmp eu ed &&
	{ gem-eval "$u1,$u0" 2>err; test $? = 2; } && grep -q "serves slice 1/2 of θ (offset [0-9]*, length [0-9]*), not 0/2" err &&
	{ gem-eval "$u0" 2>err; test $? = 2; } && grep -q "serves slice 0/2 of a sliced run" err &&
	{ gem-eval --follow "$u1" 2>err; test $? = 2; } && grep -q "serves slice 1/2 of a sliced run" err &&
	{ gem-eval "$u0," 2>err; test $? = 2; } && grep -q "empty URL" err
'

test_expect_success 'kill -9 of one slice: it resumes from its checkpoint, the other carries on' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 2 crash &&
	{ gem-serve --listen 127.0.0.1:0 --slice 0/2 --checkpoint-every 0.2 crash >/dev/null \
		2>crash0.err & s0=$!; } && test_bg $s0 &&
	{ gem-serve --listen 127.0.0.1:0 --slice 1/2 --checkpoint-every 0.2 crash >/dev/null \
		2>crash1.err & s1=$!; } && test_bg $s1 &&
	wait_for_file crash/slice-1-of-2/server.url 20 &&
	u1=$(cat crash/slice-1-of-2/server.url) && port=${u1##*:} &&
	{ gem-work -q --server crash --steps 300 --retry-for 30 --slowdown 100 2>crash.work.err &
	  worker=$!; } && test_bg $worker &&
	wait_until "[ \"\$(health_version $u1)\" -ge 40 ] 2>/dev/null" 20 &&
	# a checkpoint of slice 1 past version 0 (one every 0.2 s) is on disk
	wait_until "head -1 crash/slice-1-of-2/params.gem | grep -q \"\\\"version\\\":[1-9]\"" 20 &&
	kill -9 $s1 && { wait_exit $s1; true; } &&
	# the checkpoint is the newer of its two files (a kill between them leaves rule-state.gem,
	# which holds θ, newer than params.gem)
	saved=$(for f in params.gem rule-state.gem; do
		head -1 crash/slice-1-of-2/$f | grep -o "\"version\":[0-9]*" | head -1 | cut -d: -f2
	done | sort -n | tail -1) &&
	echo "slice 1 checkpointed at $saved" && test "$saved" -ge 1 &&
	u0=$(cat crash/slice-0-of-2/server.url) &&
	curl -sf "$u0/v1/health" >/dev/null &&
	{ gem-serve --listen 127.0.0.1:$port --slice 1/2 --checkpoint-every 0.2 crash >/dev/null \
		2>crash1b.err & s1=$!; } && test_bg $s1 &&
	wait_exit $worker 120 &&
	wait_exit $s0 30 && wait_exit $s1 30 &&
	{ cat crash1b.err; tail -3 crash.work.err; } &&
	# its rule state too, held with θ in one file
	grep -q "resumed the rule" crash1b.err &&
	grep "\"event\":\"start\"" crash/slice-1-of-2/log.jsonl | tail -1 | grep -q "\"version\":$saved," &&
	test $(grep -c "\"event\":\"start\"" crash/slice-0-of-2/log.jsonl) = 1 &&
	grep -q "joining again" crash.work.err &&
	head -1 crash/slice-0-of-2/params.gem | grep -q "\"version\":300," &&
	v1=$(head -1 crash/slice-1-of-2/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	echo "slice 1 ended at $v1" && test "$v1" -gt "$saved" &&
	gem-eval crash | awk "NR==2 { exit !(\$5 > 0.5) }"
'

test_expect_success 'gem-run --slices 2: two servers, the workers commit to both, one TSV' '
	gem-run -q -n 2 --slices 2 --model tiny.json --data data --rule gem --lr 0.05 --batch 32 \
		--seed 3 --steps 20 runs2 >runs2.tsv 2>runs2.err &&
	cat runs2.tsv &&
	test -s runs2/slice-0-of-2/log.jsonl && test -s runs2/slice-1-of-2/log.jsonl &&
	test $(grep -c "\"event\":\"join\"" runs2/slice-0-of-2/log.jsonl) = 2 &&
	test $(grep -c "\"event\":\"join\"" runs2/slice-1-of-2/log.jsonl) = 2 &&
	awk "NR == 2 && \$2 == 40 { ok = 1 } END { exit !ok }" runs2.tsv &&
	! test -e runs2/server.url
'

test_expect_success 'gem-eval --follow RUNDIR of a sliced run: whole θs while it trains, the final one last' '
	gem-init -q --model tiny.json --data data --rule gem --workers 1 --lr 0.05 --batch 32 \
		--seed 5 fol &&
	for i in 0 1; do
		{ gem-serve --listen 127.0.0.1:0 --slice $i/2 fol >/dev/null 2>fol.serve$i.err &
		  test_bg $!; } || return 1
	done &&
	wait_for_file fol/slice-0-of-2/server.url && wait_for_file fol/slice-1-of-2/server.url &&
	{ gem-eval --follow fol --interval 0.1 >fol.tsv 2>fol.eval.err & fpid=$!; } &&
	test_bg $fpid &&
	u0=$(cat fol/slice-0-of-2/server.url) && u1=$(cat fol/slice-1-of-2/server.url) &&
	{ gem-eval --follow "$u0,$u1" --interval 0.3 --retry-for 2 >folu.tsv 2>folu.err & upid=$!; } &&
	test_bg $upid &&
	gem-work -q --server fol --steps 400 --slowdown 3 2>fol.work.err &&
	wait_exit $fpid 30 &&
	cat fol.tsv fol.eval.err &&
	test $(grep -vc "^#" fol.tsv) -ge 3 &&
	awk "!/^#/ { if (\$2 < last) exit 1; last = \$2 }" fol.tsv &&
	tail -1 fol.tsv | cut -f2-5 >fol.last && gem-eval fol | tail -1 | cut -f2-5 >fol.final &&
	cmp fol.last fol.final && grep -q "^400	" fol.final &&
	# the slices'"'"' URLs: the stop seen (status 0; the run is over in a fraction of a
	# second, and a URL follow has no final checkpoint to read, so one line may be all)
	wait_exit $upid 30 &&
	cat folu.tsv folu.err &&
	test $(grep -vc "^#" folu.tsv) -ge 1 &&
	awk "!/^#/ { if (\$2 < last) exit 1; last = \$2 }" folu.tsv
'

test_expect_success 'per slice: the token is required, and a dead worker is gone from each' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --workers 3 tok &&
	echo "a-token-for-both-slices" >tok.token &&
	{ gem-serve --listen 127.0.0.1:0 --slice 0/2 --token-file tok.token --worker-timeout 1 tok \
		>/dev/null 2>tok.serve0.err & sp0=$!; } && test_bg $sp0 &&
	{ gem-serve --listen 127.0.0.1:0 --slice 1/2 --token-file tok.token --worker-timeout 1 tok \
		>/dev/null 2>tok.serve1.err & sp1=$!; } && test_bg $sp1 &&
	wait_for_file tok/slice-0-of-2/server.url && wait_for_file tok/slice-1-of-2/server.url &&
	{ gem-work -q --server tok --steps 5 --retry-for 1 2>notok.err; test $? != 0; } &&
	cat notok.err && grep -qi "token" notok.err &&
	for i in 1 2; do { gem-work -q --server tok --token-file tok.token --steps 40 & }; done &&
	{ gem-work -q --server tok --token-file tok.token --steps 40 --die-after 5 2>/dev/null; true; } &&
	wait_exit $sp0 30 && wait_exit $sp1 30 &&
	for i in 0 1; do
		grep -q "\"event\":\"gone\"" tok/slice-$i-of-2/log.jsonl &&
		test $(grep -vc "\"event\"" tok/slice-$i-of-2/log.jsonl) = $((2 * 40 + 5)) || return 1
	done
'

test_expect_success 'gem-plot-data of a sliced run: one series per slice, labelled' '
	gem-plot-data loss runs2 >plot2.tsv &&
	grep "^# run:" plot2.tsv >runs-of-plot &&
	cat runs-of-plot &&
	test $(wc -l <runs-of-plot) = 2 &&
	grep -q "gem, 2 workers, slice 0/2" runs-of-plot &&
	grep -q "gem, 2 workers, slice 1/2" runs-of-plot &&
	gem-plot-data loss runs2/slice-1-of-2 | grep -q "^# run: gem, 2 workers, slice 1/2"
'

test_expect_code 2 'gem-run --slices 0 and --slices with --rule sgp: bad usage' '
	{ gem-run -q --slices 0 bad0 2>err0; test $? = 2; } && grep -q "slices" err0 &&
	gem-run -q --slices 2 --rule sgp bad1
'

test_done
