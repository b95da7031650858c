#!/bin/bash
# t3401: a run says how it ended (its log's "end" event), and gem-run --resume reads it before it
# starts anything: a complete run is said to be so at once (exit 0, nothing started), a run that
# diverged is refused with why (by gem-run and by gem-serve, exit 2), and gem-run whose run
# diverges says so instead of advising a resume. A budget in steps (gem-run --steps) is the run's,
# in run.json: a run interrupted (Ctrl-C) or whose workers died, then resumed as gem-run advises,
# or with no --steps, ends at the version of the run left alone; a --steps given with --resume
# replaces the stored one. A resume starts no worker the run was not made for, and without -n
# it starts those it was made for.
. "$(dirname "$0")/test-lib.sh"

TINY="--model tiny.json --data data --batch 32 --lr 0.1 --seed 3"
# one worker: where it diverges does not depend on the order of two workers' commits
DIVERGES="--model tiny.json --data data --batch 32 --lr 1000 --rule downpour --seed 3"

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success 'a complete run: its log ends with "end" (complete), then "stop"' '
	gem-run -q -n 2 $TINY done >done.tsv &&
	tail -2 done/log.jsonl >tail && cat tail &&
	head -1 tail | grep -q "^{\"event\":\"end\",.*\"version\":126,\"how\":\"complete\"}$" &&
	tail -1 tail | grep -q "^{\"event\":\"stop\"" &&
	test "$(gem-serve --check done)" = "complete 126"
'

test_expect_success 'gem-run --resume of a complete run: "complete (version V)", exit 0, nothing started' '
	cp done/log.jsonl log.before &&
	{ gem-run --resume -n 2 done >out 2>err; rc=$?; } ; cat err && test $rc = 0 &&
	test "$(cat err)" = "gem-run: done is complete (version 126)" && test ! -s out &&
	cmp log.before done/log.jsonl
'

test_expect_success 'a run stopped early (--max-updates) is not complete: --resume continues it' '
	{ gem-run -q -n 1 $TINY --serve-opt=--max-updates=10 part 2>err; test $? = 1; } &&
	! grep -q "\"event\":\"end\"" part/log.jsonl && test -z "$(gem-serve --check part)" &&
	gem-run -q --resume -n 1 part >part.tsv && awk "NR == 2 && \$2 == 63 { ok = 1 } END { exit !ok }" part.tsv
'

test_expect_success 'a run that diverges: why, and no advice to resume it' '
	{ gem-run -n 1 $DIVERGES div >out 2>err; test $? = 1; } && cat err && cp err err.first &&
	grep -q "^gem-run: div: diverged at version [0-9][0-9]* (loss [0-9.e+]*); resuming will not help: make the run again with a lower --lr$" err &&
	! grep -q -- "--resume" err && test ! -s out &&
	tail -2 div/log.jsonl | head -1 | grep -q "\"event\":\"end\",.*\"worker\":0,.*\"how\":\"diverged\",\"loss\":[0-9]" &&
	grep -q "\"event\":\"leave\",.*\"diverged\":true,\"loss\":[0-9]" div/log.jsonl
'

test_expect_success 'its resume is refused with that reason, by gem-run and by gem-serve (exit 2)' '
	v=$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" div/params.gem) && cp div/log.jsonl log.before &&
	{ gem-run --resume -n 1 div >out 2>err; test $? = 2; } && cat err &&
	test "$(cat err)" = "$(grep "^gem-run: div: diverged" err.first)" &&
	grep -q "^gem-run: div: diverged at version $v (loss [0-9.e+]*); resuming will not help" err &&
	{ gem-serve --listen 127.0.0.1:0 div >out 2>err; test $? = 2; } && cat err &&
	grep -q "^gem-serve: div: diverged at version $v (loss [0-9.e+]*); resuming will not help" err &&
	{ gem-serve --check div 2>err; test $? = 2; } && grep -q "^gem-serve: div: diverged" err &&
	test ! -e div/server.url && cmp log.before div/log.jsonl
'

test_expect_success 'a diverged leave says its loss: a number, or "nan", "inf", "-inf" (JSON has none)' '
	gem-init -q $TINY --workers 2 lv &&
	start_server lv && test_when_finished "stop_if_running $SERVER_PID" &&
	for bad in "\"loss\":\"-nan\",\"diverged\":true" "\"loss\":\"NaN\",\"diverged\":true" \
		"\"loss\":true,\"diverged\":true" "\"loss\":\"inf\"" "\"loss\":2"; do
		code=$(curl -s -o reply -w "%{http_code}" -X POST -H "Content-Type: application/json" \
			--data "{\"worker\":0,$bad}" "$URL/v1/leave") && echo "$bad: $code" &&
		test "$code" = 400 || return 1
	done &&
	curl -s -X POST -H "Content-Type: application/json" --data "{\"worker\":0}" "$URL/v1/join" >/dev/null &&
	curl -s -X POST -H "Content-Type: application/json" \
		--data "{\"worker\":0,\"done\":false,\"diverged\":true,\"loss\":\"-inf\"}" "$URL/v1/leave" &&
	wait_until "grep -q \"\\\"event\\\":\\\"leave\\\".*\\\"loss\\\":\\\"-inf\\\"\" lv/log.jsonl"
'

# the version in the "end" event of run R's log, once it is complete
end_version() { sed -n "s/^{\"event\":\"end\",.*\"version\":\([0-9]*\),\"how\":\"complete\"}$/\1/p" "$1/log.jsonl"; }
# the command gem-run advised on its standard error E
advised() { sed -n "s/^gem-run: \(gem-run --resume .*\) continues the run$/\1/p" "$1"; }

test_expect_success '--steps: the budget is stored in run.json; the run left alone ends at 2 x 40' '
	gem-run -q -n 2 $TINY --steps 40 whole >whole.tsv && cat whole.tsv &&
	grep -q "^    \"steps\": 40,\?$" whole/run.json &&
	test "$(end_version whole)" = 80 && test "$(gem-serve --check whole)" = "complete 80" &&
	awk "NR == 2 && \$2 == 80 { ok = 1 } END { exit !ok }" whole.tsv
'

test_expect_success 'Ctrl-C at a version seen in the log: exit 130, the checkpoint and the command' '
	setsid env --default-signal=INT gem-run -n 2 $TINY --steps 400 --work-opt=--slowdown=50 int \
		>int.out 2>int.err &
	pid=$! && test_bg $pid && test_when_finished "stop_if_running $pid" &&
	wait_until "grep -q \"^{\\\"time\\\".*\\\"version\\\":[1-9][0-9],\" int/log.jsonl" 60 &&
	kill -INT -- -$pid &&
	{ wait $pid; rc=$?; } ; cat int.err && test $rc = 130 &&
	v=$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" int/params.gem) && test "$v" -ge 10 &&
	test "$v" -lt 800 &&
	grep -q "^gem-run: interrupted; the server checkpointed at version $v$" int.err &&
	test "$(advised int.err)" = "gem-run --resume -n 2 --steps 400 int"
'

test_expect_success 'the advised command finishes the budget: the version of the run left alone' '
	$(advised int.err) -q >int.tsv && cat int.tsv &&
	test "$(end_version int)" = 800 && awk "NR == 2 && \$2 == 800 { ok = 1 } END { exit !ok }" int.tsv
'

test_expect_success 'workers that die (--die-after): the advice, and a resume with no --steps' '
	{ gem-run -n 2 $TINY --steps 40 --work-opt=--die-after=10 died >out 2>died.err; test $? = 1; } &&
	cat died.err && test "$(advised died.err)" = "gem-run --resume -n 2 --steps 40 died" &&
	grep -q "^gem-run: 2 of 2 workers failed; the server checkpointed at version 20$" died.err &&
	gem-run -q --resume -n 2 died >died.tsv && cat died.tsv && test "$(end_version died)" = 80
'

test_expect_success 'the advised command after workers died (--die-after)' '
	{ gem-run -n 2 $TINY --steps 40 --work-opt=--die-after=10 died2 >out 2>died2.err; test $? = 1; } &&
	$(advised died2.err) -q >died2.tsv && test "$(end_version died2)" = 80
'

test_expect_success 'a raised budget: the server waits for each worker that spent the old one' '
	cp -r whole raised &&
	start_server raised --steps 50 && test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --worker-id 0 &&
	# worker 0 has left (its leave in the log, written out every 0.2 s), and the server,
	# still waiting for worker 1, answers
	wait_until "grep -q \"\\\"event\\\":\\\"leave\\\"\" raised/log.jsonl" 30 &&
	curl -sf --max-time 10 "$URL/v1/health" >/dev/null && kill -0 $SERVER_PID &&
	gem-work -q --server "$URL" --worker-id 1 &&
	wait_exit $SERVER_PID && test "$(end_version raised | tail -1)" = 100
'

test_expect_success '--resume --steps S: an explicit budget wins, is stored, and the run goes on to it' '
	test -z "$(gem-serve --check --steps 50 whole)" &&
	gem-run -q --resume -n 2 --steps 50 whole >more.tsv && cat more.tsv &&
	grep -q "^    \"steps\": 50,\?$" whole/run.json &&
	awk "NR == 2 && \$2 == 100 { ok = 1 } END { exit !ok }" more.tsv &&
	test "$(gem-serve --check whole)" = "complete 100" &&
	{ gem-run --resume -n 2 whole >out 2>err; test $? = 0; } &&
	test "$(cat err)" = "gem-run: whole is complete (version 100)"
'

test_expect_success '--resume with more workers than the run was made for: refused, nothing started' '
	{ gem-run -q -n 1 $TINY --serve-opt=--max-updates=5 one 2>err; test $? = 1; } &&
	cp one/log.jsonl log.before &&
	{ gem-run --resume -n 2 one >out 2>err; test $? = 2; } && cat err &&
	grep -q "^gem-run: one: a run of 1 worker (gem-init --workers), .*resume with -n 1 or fewer" err &&
	test ! -s out && cmp log.before one/log.jsonl
'

test_expect_success '--resume with a gem-init option: --steps is named as the way to extend a run' '
	{ gem-run --resume -e 2 one >out 2>err; test $? = 2; } && cat err &&
	grep -q "^gem-run: --resume takes no gem-init options (--epochs is one).*--resume --steps S" err &&
	cmp log.before one/log.jsonl
'

test_expect_success '--resume without -n: the workers the run was made for' '
	gem-run -q --resume one >one.tsv && cat one.tsv && test "$(grep -c "\"event\":\"join\"" one/log.jsonl)" = 2 &&
	awk "NR == 2 && \$2 == 63 { ok = 1 } END { exit !ok }" one.tsv
'

test_expect_success 'gem-serve --steps: a bad budget is refused (exit 2)' '
	{ gem-serve --check --steps 0 whole 2>err; test $? = 2; } && grep -q -- "--steps: not an integer" err &&
	{ gem-run -n 2 --steps 2x $TINY bad 2>err; test $? = 2; } && test ! -e bad
'

test_done
