#!/bin/bash
# t0002: the test library itself. Small scripts that use t/test-lib.sh run here and their TAP
# is checked: test_when_finished runs after a test that passes and after one that fails (last
# registered first, a failing cleanup fails the test), -i stops at the first failing test and
# leaves its trash directory, -v sends the commands' output to stderr, GEM_TEST_OPTS, the
# options through t/run-test and prove. The checks are also run against copies of the library
# with test_when_finished or -i broken, and must fail there. And t/README's index names every
# test file.
. "$(dirname "$0")/test-lib.sh"

# the scripts here take no options from our caller
unset GEM_TEST_OPTS
LIB="$GEM_SRC/t/test-lib.sh"
mkdir -p tmp
# where the scripts' tests leave their traces (they run in trash directories of their own)
T0002=$PWD
export T0002

# sub NAME 'BODY': NAME.sh, a test script of BODY (then test_done) on the library $TLIB.
sub() {
	{
		echo '#!/bin/bash'
		echo '. "$TLIB"'
		printf '%s\n' "$2"
		echo 'test_done'
	} >"$1.sh"
}

# run_sub NAME [options]: run NAME.sh; its stdout in NAME.out, stderr in NAME.err, status in
# NAME.rc. Its trash directory goes under ./tmp.
run_sub() {
	_n=$1
	shift
	TLIB=${TLIB:-$LIB} TMPDIR=$PWD/tmp bash "$_n.sh" "$@" >"$_n.out" 2>"$_n.err"
	echo $? >"$_n.rc"
}

# Before anything else, outside any test (whose results this library reports): a failing test
# must be reported as failing.
sub fails 'test_expect_success "fails" "false"'
run_sub fails
if [ "$(cat fails.rc)" != 1 ] || ! grep -q "^not ok 1 - fails$" fails.out; then
	echo "Bail out! test-lib.sh reports a failing test as passing"
	exit 1
fi

sub when '
test_expect_success "passes, with a cleanup" "
	test_when_finished \"echo cleanup-1 >>$T0002/trace\" &&
	echo body-1 >>$T0002/trace
"
test_expect_success "fails, with a cleanup" "
	test_when_finished \"echo cleanup-2 >>$T0002/trace\" &&
	echo body-2 >>$T0002/trace &&
	false &&
	echo not-reached >>$T0002/trace
"
test_expect_success "two cleanups: last registered first" "
	test_when_finished \"echo cleanup-3a >>$T0002/trace\" &&
	test_when_finished \"echo cleanup-3b >>$T0002/trace\" &&
	echo body-3 >>$T0002/trace
"
test_expect_success "a failing cleanup fails the test" "
	test_when_finished \"echo cleanup-4 >>$T0002/trace && false\" &&
	echo body-4 >>$T0002/trace
"
test_expect_success "a cleanup that is not reached is not registered" "
	false &&
	test_when_finished \"echo cleanup-5 >>$T0002/trace\"
"
test_expect_success "return 1 fails a test and the script goes on" "
	echo body-6 >>$T0002/trace &&
	test_when_finished \"echo cleanup-6 >>$T0002/trace\" &&
	return 1
"
test_expect_success "after them" "echo body-7 >>$T0002/trace"
'

# check_when: the trace and the TAP of when.sh (run with $TLIB) are what they must be.
check_when() {
	rm -f trace &&
	run_sub when &&
	printf "%s\n" body-1 cleanup-1 body-2 cleanup-2 body-3 cleanup-3b cleanup-3a \
		body-4 cleanup-4 body-6 cleanup-6 body-7 >trace.want &&
	diff trace.want trace &&
	printf "%s\n" "ok 1 - passes, with a cleanup" "not ok 2 - fails, with a cleanup" \
		"ok 3 - two cleanups: last registered first" "not ok 4 - a failing cleanup fails the test" \
		"not ok 5 - a cleanup that is not reached is not registered" \
		"not ok 6 - return 1 fails a test and the script goes on" "ok 7 - after them" "1..7" >tap.want &&
	grep -v "^#" when.out >tap &&
	diff tap.want tap &&
	test "$(cat when.rc)" = 1
}

test_expect_success 'test_when_finished runs after a test that passes and one that fails' '
	TLIB=$LIB check_when
'

test_expect_success 'the check fails on a library whose test_when_finished runs nothing' '
	sed "/^test_when_finished() {/a return 0" "$LIB" >nowhen-lib.sh &&
	grep -q "^return 0" nowhen-lib.sh &&
	! TLIB=$PWD/nowhen-lib.sh check_when
'

test_expect_success 'test_when_finished outside test_expect_success is a bug' '
	sub outside "
test_when_finished \"echo never\" || echo refused
test_expect_code 1 \"in test_expect_code\" \"test_when_finished \\\"echo never\\\" || exit 1; exit 0\"
" &&
	run_sub outside &&
	grep -q "^refused$" outside.out && grep -q "^ok 1 - in test_expect_code$" outside.out &&
	grep -q "BUG: test_when_finished outside" outside.err && ! grep -q never outside.out
'

sub imm '
test_expect_success "one" "true"
test_expect_success "two fails" "
	test_when_finished \"rm left-behind\" &&
	echo state >left-behind && echo output of two && false
"
test_expect_success "three" "echo three >>$T0002/tmp/three-ran"
test_expect_code 0 "four" "true"
'

# check_immediate OPTIONS...: imm.sh stops at test 2, the plan 1..2, exit 1, the trash left
# with the failing test's files (its cleanup not run).
check_immediate() {
	rm -rf tmp/* &&
	run_sub imm "$@" &&
	cat imm.out imm.err &&
	printf "%s\n" "ok 1 - one" "not ok 2 - two fails" "1..2" >want &&
	grep -v "^#" imm.out >got && diff want got &&
	grep -q "^#   output of two$" imm.out &&
	test "$(cat imm.rc)" = 1 &&
	test ! -e tmp/three-ran &&
	trash=$(sed -n "s/^# trash directory left for inspection: //p" imm.err) &&
	test -d "$trash" && test "$(cat "$trash/left-behind")" = state &&
	case $trash in "$PWD"/tmp/gem-test.imm.*) ;; *) false ;; esac
}

test_expect_success '-i stops at the first failing test and leaves the trash directory' '
	check_immediate -i
'
test_expect_success '--immediate, and GEM_TEST_OPTS=-i, do the same' '
	check_immediate --immediate &&
	GEM_TEST_OPTS=-i check_immediate
'

test_expect_success 'without -i every test runs, the trash is removed, the cleanup runs' '
	rm -rf tmp/* &&
	run_sub imm &&
	printf "%s\n" "ok 1 - one" "not ok 2 - two fails" "ok 3 - three" "ok 4 - four" "1..4" >want &&
	grep -v "^#" imm.out >got && diff want got &&
	test "$(cat imm.rc)" = 1 && test -f tmp/three-ran &&
	test -z "$(ls tmp | grep gem-test)"
'

test_expect_success 'the -i check fails on a library that ignores -i' '
	sed "s/^	-i | --immediate) immediate=t ;;/	-i | --immediate) ;;/" "$LIB" >noimm-lib.sh &&
	! cmp -s "$LIB" noimm-lib.sh &&
	! TLIB=$PWD/noimm-lib.sh check_immediate -i
'

test_expect_success '-i kills the background processes registered with test_bg' '
	sub bg "
test_expect_success \"a daemon, then a failure\" \"
	{ sleep 300 & } && echo \\\$! >$T0002/bg.pid && test_bg \\\$(cat $T0002/bg.pid) && false
\"
" &&
	run_sub bg -i && test "$(cat bg.rc)" = 1 &&
	pid=$(cat bg.pid) && test -n "$pid" &&
	for i in $(seq 50); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done &&
	! kill -0 $pid 2>/dev/null
'

sub verbose '
test_expect_success "talks" "echo to-stdout && echo to-stderr >&2"
test_expect_success "fails talking" "echo failing-output && false"
test_expect_code 3 "exits 3, talking" "echo code-output; exit 3"
'

test_expect_success '-v: the commands output goes to stderr, the TAP alone to stdout' '
	run_sub verbose -v &&
	test "$(cat verbose.rc)" = 1 &&
	printf "%s\n" "ok 1 - talks" "not ok 2 - fails talking" "ok 3 - exits 3, talking" "1..3" >want &&
	diff want verbose.out &&
	grep -q "^to-stdout$" verbose.err && grep -q "^to-stderr$" verbose.err &&
	grep -q "^failing-output$" verbose.err && grep -q "^code-output$" verbose.err &&
	grep -q "^# expecting success 1 - talks:" verbose.err
'

test_expect_success 'without -v: the output of a failing test only, as # lines on stdout' '
	run_sub verbose &&
	! grep -q to-std verbose.out && grep -q "^#   failing-output$" verbose.out &&
	! grep -q code-output verbose.out && test ! -s verbose.err
'

test_expect_success 'an unknown option is refused' '
	run_sub verbose --bogus && test "$(cat verbose.rc)" = 1 && grep -q "unknown option" verbose.err
'

test_expect_success 'run by sh, a test starts again under bash' '
	sub bashism "test_expect_success \"a bash array\" \"a=(x y) && test \\\${#a[@]} = 2\"" &&
	TLIB=$LIB TMPDIR=$PWD/tmp sh bashism.sh -v >b.out 2>b.err &&
	grep -q "^ok 1 - a bash array$" b.out
'

test_expect_success 't/run-test passes the options to a shell test' '
	TLIB=$LIB TMPDIR=$PWD/tmp "$GEM_SRC/t/run-test" "$PWD/imm.sh" -i >rt.out 2>rt.err;
	test $? = 1 && grep -q "^1..2$" rt.out && ! grep -q "^ok 3" rt.out
'

test_expect_success 'prove --exec t/run-test ... :: -i -v passes them too' '
	command -v prove >/dev/null || { echo "no prove"; false; } &&
	{ TLIB=$LIB TMPDIR=$PWD/tmp prove -v --exec "$GEM_SRC/t/run-test" imm.sh :: -i -v >p.out 2>p.err;
	  test $? != 0; } &&
	cat p.out p.err &&
	grep -q "^not ok 2 - two fails" p.out && ! grep -q "^ok 3" p.out &&
	grep -q "^output of two$" p.err
'

# t/README's families are the index of the suite: a test file it does not name is one a reader
# cannot find. An entry is "tNNNN  what it shows", or a range "tAAAA-tBBBB  ...".
test_expect_success 't/README names every test file' '
	sed -n "/^The families/,/^Real hosts/p" "$GEM_SRC/t/README" |
		grep -o "t[0-9]\{4\}\(-t[0-9]\{4\}\)\{0,1\}  " | tr -d " t" >index &&
	test -s index &&
	for f in "$GEM_SRC"/t/t[0-9]*.c "$GEM_SRC"/t/t[0-9]*.sh "$GEM_SRC"/t/hosts/t[0-9]*.sh; do
		n=$(basename "$f" | cut -c2-5) &&
		awk -F- -v n=$n "{ b = NF > 1 ? \$2 : \$1 } \$1 + 0 <= n + 0 && n + 0 <= b + 0 { f = 1 }
			END { exit !f }" index ||
			{ echo "t/README does not name t$n ($f)"; return 1; }
	done
'

test_done
