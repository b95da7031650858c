#!/bin/bash
# t6320: an external model that misbehaves (gem-exec(7)): one that crashes, hangs, answers
# garbage or prints on its standard output, says another layout than the run recorded, gives a
# loss or a gradient that is not finite, or does not exit at the end. Each time the program
# fails (exit 1) with a message that names the child and the request, the run's checkpoint is
# as it was, and no process of the child is left. A child that answers differently for the same
# request is found by gem-sim --replay. The child's standard error reaches gem's, prefixed.
. "$(dirname "$0")/test-lib.sh"

# child NAME: a copy of t/exec-numpy.py at a path of this test's own, so that its processes can
# be found (and found gone) by that path
child() { cp "$GEM_SRC/t/exec-numpy.py" "$PWD/$1.py" && echo "/usr/bin/python3 $PWD/$1.py"; }
# gone NAME: no process runs the child NAME (a child is killed with its process group: at once)
gone() { wait_until "! pgrep -f \"$PWD/$1.py\" >/dev/null" 5; }
# bad NAME FLAGS...: a run of 150 samples a step whose child is NAME started with FLAGS
bad() {
	_n=$1; shift
	gem-init -q --model "exec:$(child "$_n") $*" -b 16 -e 1 --exec-timeout 2 "$_n" &&
	cp "$_n/params.gem" "$_n.before"
}
# fails NAME PATTERN...: gem-work --local on run NAME exits 1, its message names the child and
# each PATTERN, params.gem is as gem-init wrote it, and the child is gone
fails() {
	_n=$1; shift
	exits 1 gem-work -q --local "$_n" 2>"$_n.err"
	_rc=$?
	cat "$_n.err"
	[ $_rc = 0 ] && grep -q "exec model '/usr/bin/python3 $PWD/$_n.py" "$_n.err" &&
	for _p in "$@"; do grep -q -- "$_p" "$_n.err" || { echo "no '$_p'"; return 1; }; done &&
	cmp "$_n/params.gem" "$_n.before" && gone "$_n"
}

test_expect_success 'a child that crashes in a request' '
	bad crash --crash-at=grad:3 &&
	fails crash "request grad (worker -1, position 32)" "exited with status 3"
'

test_expect_success 'a child that hangs: killed after --exec-timeout' '
	bad hang --hang-at=grad:2 &&
	fails hang "request grad (worker -1, position 16)" "no answer within 2 s" "killed"
'

test_expect_success 'a child that answers garbage' '
	bad garbage --garbage=grad:1 &&
	fails garbage "request grad" "not one JSON object: \"this is not JSON {\""
'

test_expect_success 'a child that prints on its standard output' '
	bad stdout --print-stdout=grad:2 &&
	fails stdout "request grad" "not one JSON object: \"hello from the model"
'

test_expect_success 'a child that says another layout than the run recorded' '
	bad other --wrong-size &&
	GEM_TEST_OTHER=1 fails other "is not the run'"'"'s model" "its tensor 0 is 0.weight of 68 floats, the run'"'"'s 0.weight of 64"
'

test_expect_success 'a loss that is not finite, a loss beyond a float, a gradient that is not' '
	bad nan --nan &&
	fails nan "request grad" "a number in the reply is not finite: \"{\"loss\": NaN}\"" &&
	bad overflow --nan=overflow &&
	fails overflow "request grad" "loss 1e+39 is not finite" &&
	bad nangrad --nan-grad &&
	fails nangrad "request grad" "the gradient'"'"'s element 65 is not finite"
'

test_expect_success 'a child that fails at gem-init: no run is made' '
	! gem-init -q --model "exec:$(child early) --crash-at=init" noinit 2>noinit.err &&
	cat noinit.err && grep -q "request init" noinit.err && test ! -e noinit/run.json && gone early &&
	! gem-init -q --model "exec:/nonexistent/model" norun 2>norun.err &&
	cat norun.err && grep -q "request hello: the child exited with status 127" norun.err
'

test_expect_success 'a child that ignores the end of its input is killed 2 s later' '
	gem-init -q --model "exec:$(child noexit) --no-exit --stderr-chatter" -b 16 -e 1 noexit &&
	gem-work -q --local noexit 2>noexit.err && gone noexit &&
	grep -q "^noexit.py\[[0-9]*\]: chatter: request grad #19$" noexit.err
'

test_expect_success 'a child that answers differently on replay: gem-sim --replay says so' '
	gem-init -q --model "exec:$(child noisy) --nondeterministic" -b 16 -e 1 --workers 1 noisy &&
	start_server noisy &&
	gem-work -q --server noisy && stop_server &&
	! gem-sim -q --replay noisy/log.jsonl again 2>again.err &&
	cat again.err &&
	grep -q "worker 0.s commit has the loss .* in the log: the replay went another way" again.err
'

test_done
