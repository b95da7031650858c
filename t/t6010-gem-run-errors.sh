#!/bin/bash
# t6010: gem-run speaks for itself: its programs' complaints come as gem-run's (with gem-run's
# usage line), a failed run prints no TSV, bash prints no "line N: PID Killed", a run to
# resume must exist, and --steps bounds every worker.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success "gem-init's complaint is gem-run's, with gem-run's usage line" '
	{ gem-run -n 1 --model tiny.jsn --data data r1 >out 2>err; test $? = 2; } &&
	cat err &&
	grep -q "^gem-run: .*tiny.jsn" err &&
	grep -q "^usage: gem-run " err &&
	! grep -q "^gem-init\|^usage: gem-init" err &&
	test ! -s out
'

test_expect_success 'a typo in a built-in model name: the guess reaches the user' '
	{ gem-run -n 1 --model mlpp --data data r1 2>err; test $? = 2; } &&
	grep -q "^gem-run: unknown model \"mlpp\" (did you mean mlp?)" err
'

test_expect_success 'a model named without .json, the spec file here: the file is advised' '
	{ gem-run -n 1 --model tiny --data data r11 2>err; test $? = 2; } && cat err &&
	grep -q "^gem-run: --model tiny: .*did you mean --model tiny.json" err && test ! -e r11
'

test_expect_success '--slice-hosts: an unreadable file, one slice, SGP: exit 2, nothing made' '
	echo node9 >sh &&
	{ gem-run -n 1 --slices 2 --slice-hosts no-such-file --model tiny.json --data data rs1 2>err; test $? = 2; } &&
	grep -q "^gem-run: --slice-hosts: cannot read no-such-file" err &&
	{ gem-run -n 1 --slice-hosts sh --model tiny.json --data data rs2 2>err; test $? = 2; } &&
	grep -q "^gem-run: --slice-hosts: needs --slices 2 or more" err &&
	printf "# none\n\n" >empty &&
	{ gem-run -n 1 --slices 2 --slice-hosts empty --model tiny.json --data data rs3 2>err; test $? = 2; } &&
	grep -q "^gem-run: --slice-hosts: no hosts in empty" err &&
	{ gem-run -n 2 --rule sgp --slice-hosts sh --model tiny.json --data data rs4 2>err; test $? = 2; } &&
	grep -q "^gem-run: --slice-hosts: not with --rule sgp" err &&
	test ! -e rs1 && test ! -e rs2 && test ! -e rs3 && test ! -e rs4
'

test_expect_success '--slices out of range, however long: gem-run'"'"'s error alone' '
	for k in 99999999999999999999999 0 65 064 2x ""; do
		{ gem-run -n 1 --slices "$k" --model tiny.json --data data rk 2>err; test $? = 2; } &&
		cat err && grep -q "^gem-run: --slices: not an integer in \[1, 64\]: $k\$" err &&
		test "$(grep -vc "^usage:\|^   or:" err)" = 1 || return 1
	done &&
	test ! -e rk
'

test_expect_success "gem-serve's complaint about a --serve-opt: exit 2, no TSV" '
	{ gem-run -n 1 --model tiny.json --data data --serve-opt=--bogus r2 >out 2>err; test $? = 2; } &&
	cat err &&
	grep -q "^gem-run: gem-serve: .*--bogus" err &&
	grep -q "^usage: gem-run " err && ! grep -q "^usage: gem-serve" err &&
	test ! -s out
'

test_expect_success 'what a worker or a server would refuse is refused before anything is made' '
	for opt in --codec=zlb --work-opt=--slowdown=0 --work-opt=--overlap --serve-opt=--max-staleness=-1 \
		--serve-opt=--bogus --listen=nowhere "--rule sgp --work-opt=--topology=star"; do
		{ gem-run -n 2 $opt --model tiny.json --data data r8 >out 2>err; rc=$?; } &&
		echo "$opt: exit $rc" && cat err && test $rc = 2 &&
		grep -q "^usage: gem-run " err && ! grep -q "^usage: gem-\(work\|serve\)" err &&
		test ! -e r8 && test ! -s out || return 1
	done &&
	{ gem-run -n 1 --codec zlb --model tiny.json --data data r8 2>err; test $? = 2; } &&
	grep -q "^gem-run: gem-work: --codec: unknown codec \"zlb\" (did you mean zlib?)" err
'

test_expect_success 'an option neither gem-run nor gem-init knows is named; RUNDIR is not taken' '
	for opt in --verbose --verbose=2 -v; do
		{ gem-run -n 2 --steps 10 $opt r9 >out 2>err; test $? = 2; } && cat err &&
		grep -q "^gem-run: unrecognized option '"'"'${opt%%=*}'"'"'$" err &&
		! grep -q "no RUNDIR" err && test ! -e r9 || return 1
	done &&
	# gem-init'"'"'s options still take their values, and its flags none
	gem-run -q -n 1 --steps 2 --model tiny.json -d data --nesterov -b 16 --gem-ref=pull r9 >out &&
	grep -q "test_acc" out && grep -q "\"nesterov\": true" r9/run.json && grep -q "\"batch\": 16" r9/run.json
'

test_expect_success '--resume of a run that does not exist: "not a run", exit 2, nothing made' '
	{ gem-run -n 2 --resume nosuch/ >out 2>err; test $? = 2; } &&
	cat err &&
	grep -q "^gem-run: nosuch: not a run" err &&
	test ! -e nosuch && test ! -s out
'

test_expect_success '--steps S: every worker trains S steps; "1 worker", one slash' '
	gem-run -n 2 --steps 5 --model tiny.json --data data --batch 16 r3/ >out 2>err &&
	cat err &&
	awk -F "\t" "!/^#/ { exit !(\$2 == 10 && \$3 == 160) }" out &&
	grep -q "starting 2 workers" err &&
	! grep -q "r3//" err &&
	gem-run -n 1 -t 2 --model tiny.json --data data r4 >out 2>err &&
	grep -q "starting 1 worker$" err &&
	awk -F "\t" "!/^#/ { exit !(\$2 == 2) }" out
'

test_expect_code 2 '--steps takes a positive integer' 'gem-run -n 1 --steps 0 r5'

test_expect_success '--steps S: the progress counts S steps of every worker, not their epochs' '
	GEM_PROGRESS=lines:0.1 gem-run -n 2 --steps 30 --work-opt=--slowdown=1000 --model tiny.json \
		--data data --batch 32 r10 >out 2>err &&
	grep "samples (" err && grep "samples (" err | tail -1 | grep -q " [0-9]*/1920 samples "
'

test_expect_success 'workers killed by a signal: no TSV, and no message of bash' '
	{ gem-run -n 2 --steps 50 --model tiny.json --data data --work-opt=--die-after=2 \
		--serve-opt=--worker-timeout=1 r6 >out 2>err; test $? = 1; } &&
	cat err &&
	grep -q "^gem-run: 2 of 2 workers failed" err &&
	! grep -q "line [0-9]*:\|Killed" err &&
	test ! -s out
'

test_expect_success 'sliced, workers failed: each slice'"'"'s version, and a resume line with --slices' '
	{ gem-run -n 2 --steps 50 --slices 2 --model tiny.json --data data --work-opt=--die-after=2 \
		--serve-opt=--worker-timeout=1 r7 >out 2>err; test $? = 1; } &&
	cat err &&
	v0=$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" r7/slice-0-of-2/params.gem) &&
	v1=$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" r7/slice-1-of-2/params.gem) &&
	test "$v0" -gt 0 &&
	grep -q "^gem-run: 2 of 2 workers failed; the slices checkpointed at versions $v0, $v1\$" err &&
	grep -q "^gem-run: gem-run --resume -n 2 --steps 50 --slices 2 r7 continues the run" err &&
	test ! -s out
'

test_done
