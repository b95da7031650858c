#!/bin/bash
# t3802: long jobs say what they are doing. gem-run, gem-sim, gem-work --local and gem-serve show
# their progress out of the job's known total (samples), with rate, ETA and smoothed loss
# (role/progress, t3800), as a line refreshed in place on a terminal (GEM_PROGRESS=tty forces it
# here) or plain lines (GEM_PROGRESS=lines:S); -q silences it. gem-serve ends with a summary,
# and gem-work says it waits for a server that is not there yet.
. "$(dirname "$0")/test-lib.sh"

TINY="--model tiny.json --data data --lr 0.1 --batch 32 --seed 3"
# test_expect_code_ N CMD...: CMD exits N; test_must_be_empty_ FILE: FILE is empty.
test_expect_code_() { _want=$1; shift; "$@"; _got=$?; test $_got = $_want || { echo "exit $_got, want $_want"; return 1; }; }
test_must_be_empty_() { test ! -s "$1" || { echo "$1 is not empty:"; cat "$1"; return 1; }; }
# a progress line out of TOTAL samples
line_re() { echo "version [0-9]*  [0-9]*/$1 samples ([0-9.]*%)  [0-9.]* updates/s  ETA [0-9:?]*"; }

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success 'gem-run: lines out of workers x epochs x the training set, the server summary' '
	GEM_PROGRESS=lines:0.2 gem-run -n 2 $TINY --epochs 5 --work-opt=--slowdown=40 run \
		>eval.tsv 2>err &&
	cat err &&
	# 2 workers x 5 epochs x 2000 samples
	grep -q "^gem-run: $(line_re 20000)  loss [0-9.]*  [0-9]* workers\?$" err &&
	v=$(head -1 run/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	grep -q "^gem-run: server: version $v ($v updates in this session), 20000 samples, 2 workers (2 finished)" err &&
	! grep -q "$(printf "\r")" err
'

test_expect_success 'gem-run -q: no progress, no summary' '
	GEM_PROGRESS=lines:0.2 gem-run -q -n 2 $TINY --epochs 5 --work-opt=--slowdown=40 runq \
		>eval.tsv 2>err &&
	test_must_be_empty_ err
'

test_expect_success 'gem-run: GEM_PROGRESS=tty refreshes one line in place' '
	GEM_PROGRESS=tty gem-run -n 2 $TINY --epochs 5 --work-opt=--slowdown=100 runt >eval.tsv 2>err &&
	grep -q "$(printf "\r")gem-run: $(line_re 20000)" err &&
	grep -q "$(printf "\033")\[K$" err
'

test_expect_success 'gem-sim: lines out of its workers budgets' '
	GEM_PROGRESS=lines:0.1 gem-sim -n 4 $TINY --epochs 40 sim >sim.tsv 2>err &&
	cat err &&
	grep -q "^gem-sim: $(line_re 320000)  loss [0-9.]*  vtime [0-9.]*  [0-9]* workers\?$" err
'

test_expect_success 'gem-work --local: lines out of the budget, or of --steps' '
	gem-init -q $TINY --epochs 20 loc &&
	GEM_PROGRESS=lines:0.1 gem-work --local loc --slowdown 20 2>err &&
	cat err &&
	grep -q "^gem-work: $(line_re 40000)  loss [0-9.]*  epoch [0-9.]*$" err &&
	GEM_PROGRESS=lines:0.1 gem-work --local loc --steps 400 --slowdown 20 2>err &&
	grep -q "^gem-work: $(line_re 52800)" err &&
	GEM_PROGRESS=lines:0.1 gem-work -q --local loc --steps 400 --slowdown 20 2>err &&
	test_must_be_empty_ err
'

test_expect_success 'gem-serve: a status line with its workers, and a summary at the end' '
	gem-init -q $TINY --epochs 6 --workers 2 srv &&
	export GEM_PROGRESS=lines:0.2 &&
	start_server srv &&
	unset GEM_PROGRESS &&
	{ gem-work -q --server "$URL" --slowdown 40 & } &&
	w=$! &&
	gem-work -q --server "$URL" --slowdown 80 &&
	wait $w &&
	wait_exit $SERVER_PID &&
	cat srv/serve.err &&
	grep -q "^gem-serve: $(line_re 24000)  loss [0-9.]*  [0-2] workers\?" srv/serve.err &&
	v=$(head -1 srv/params.gem | sed -n "s/.*\"version\":\([0-9]*\).*/\1/p") &&
	grep -q "^gem-serve: done: version $v ($v updates in this session), 24000 samples, 2 workers (2 finished), [0-9.]* s of training, loss [0-9.]*, [1-9][0-9]* bytes in, [1-9][0-9]* out, rule state [0-9.]* [KMG]iB, [0-9.]* [KMG]iB with copies and buffers (peak [0-9.]* [KMG]iB)$" srv/serve.err
'

test_expect_success 'gem-serve: the summary without a terminal too, and GET /v1/stats has the progress' '
	start_server srv --keep-running &&
	curl -s "$URL/v1/stats" >stats0.json &&
	gem-work -q --server "$URL" --worker-id 0 --steps 3 &&
	curl -s "$URL/v1/stats" >stats.json &&
	stop_server &&
	grep -q "\"progress\":{.*\"total\":24000" stats0.json &&
	# worker 0 (its 12000 samples spent) said it trains 3 steps of 32 more: the total counts
	# those instead of its budget
	grep -q "\"progress\":{.*\"total\":24096" stats.json &&
	grep -q "\"line\":\"$(line_re 24096)" stats.json &&
	! grep -q "updates/s  ETA.*workers" srv/serve.err &&
	grep -q "^gem-serve: done: version [0-9]* (3 updates in this session)" srv/serve.err
'

test_expect_success 'the slowest worker is the one with the fewest samples/s since it joined' '
	gem-init -q $TINY --epochs 100 --workers 2 slow &&
	start_server slow &&
	{ gem-work -q --server "$URL" --worker-id 0 --slowdown 10 & } &&
	w0=$! &&
	{ gem-work -q --server "$URL" --worker-id 1 --slowdown 200 & } &&
	w1=$! &&
	# a rate is measured a second after a join: wait until the stats name the slowest
	wait_for_joins slow 2 &&
	wait_until "curl -s \"\$URL/v1/stats\" >stats.json && grep -q \"\\\"slowest\\\":1,\" stats.json" 30 &&
	stop_server &&
	{ wait $w0; wait $w1; true; } &&
	sed -n "s/.*\"progress\":{\(.*\)/\1/p" stats.json &&
	grep -q "\"slowest\":1," stats.json
'

test_expect_success 'a bad GEM_PROGRESS is refused (exit 2) before anything is made' '
	test_expect_code_ 2 env GEM_PROGRESS=yes gem-sim -n 2 $TINY nosim &&
	test ! -e nosim &&
	test_expect_code_ 2 env GEM_PROGRESS=lines:x gem-run -n 2 $TINY norun &&
	test ! -e norun &&
	test_expect_code_ 2 env GEM_PROGRESS=yes gem-work --local loc &&
	test_expect_code_ 2 env GEM_PROGRESS=yes gem-serve srv
'

test_expect_success 'gem-work waits for a server that is not there yet, and says so' '
	test_expect_code_ 1 gem-work --server http://127.0.0.1:1 --retry-for 0.5 2>err &&
	cat err &&
	grep -q "^gem-work: waiting for server at http://127.0.0.1:1 (retrying for 0.5 s)$" err &&
	grep -q "unreachable for 0.5 s" err &&
	test_expect_code_ 1 gem-work -q --server http://127.0.0.1:1 --retry-for 0.5 2>err &&
	! grep -q waiting err
'
test_done
