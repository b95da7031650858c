# test-lib.sh: gem's shell test library (in the manner of git's t/test-lib.sh).
# A test sources it, calls test_expect_success 'title' 'commands' as often as it needs,
# then test_done. Each test runs in a fresh trash directory; programs come from $GEM_BIN.
# Processes a test starts in the background are registered with test_bg and killed at exit,
# also when the test fails. t/README describes the suite, the options and every function.
#
# Options, given to the test script or in $GEM_TEST_OPTS (for prove and make test):
#   -v, --verbose    the commands' output goes to stderr as they run, instead of being kept
#                    and shown only under a failing test
#   -i, --immediate  stop at the first failing test and leave the trash directory (and the
#                    failing test's state: its test_when_finished commands are not run)

# The tests are bash scripts: run by sh (dash), start again under bash.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"

: "${GEM_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${GEM_BIN:=$GEM_SRC/bin}"
export GEM_SRC GEM_BIN
PATH="$GEM_BIN:$PATH"
export PATH
GEM_SHARE_DIR="$GEM_SRC/share/gem"
export GEM_SHARE_DIR

verbose=
immediate=
# shellcheck disable=SC2086 # GEM_TEST_OPTS is a list of words
for _opt in ${GEM_TEST_OPTS:-} "$@"; do
	case $_opt in
	-v | --verbose) verbose=t ;;
	-i | --immediate) immediate=t ;;
	-h | --help)
		echo "usage: $0 [-v | --verbose] [-i | --immediate]   (or GEM_TEST_OPTS=\"-v -i\")"
		exit 0 ;;
	*)
		echo "error: $0: unknown option '$_opt' (options: -v, --verbose, -i, --immediate)" >&2
		exit 1 ;;
	esac
done
unset _opt

test_count=0
test_failures=0
test_bg_pids=
test_in_body=
test_when_finished_cmds=
test_keep_trash=
TEST_NAME=$(basename "$0" .sh)
TRASH="${TMPDIR:-/tmp}/gem-test.$TEST_NAME.$$"
rm -rf "$TRASH" && mkdir -p "$TRASH" || exit 1
cd "$TRASH" || exit 1

test_cleanup() {
	for p in $test_bg_pids; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	cd / || return
	if [ -n "$test_keep_trash" ]; then
		echo "# trash directory left for inspection: $TRASH" >&2
	else
		rm -rf "$TRASH"
	fi
}
trap test_cleanup EXIT
trap 'exit 130' INT TERM

# test_bg PID: kill PID when the test script exits.
test_bg() { test_bg_pids="$test_bg_pids $1"; }

# test_when_finished 'commands': run the commands once the body of the current
# test_expect_success has ended, whether it passed or failed (as git's). Several run last
# registered first. A cleanup that fails makes the test fail. Register the cleanup before
# the command that needs it, and chain it with && like any other command:
#	test_expect_success 'a server' '
#		start_server run && test_when_finished "stop_if_running $SERVER_PID" && ...
# With -i, a failing test's cleanups are not run: its state is left in the trash directory
# (its background processes registered with test_bg are still killed at exit).
test_when_finished() {
	if [ -z "$test_in_body" ]; then
		echo "BUG: test_when_finished outside a test_expect_success body" >&2
		return 1
	fi
	test_when_finished_cmds="{ $*
} && (exit \"\$_test_ret\"); _test_ret=\$?; $test_when_finished_cmds"
}

# test_eval_ BODY: evaluate a test's body in this shell (so that a test can set variables
# and start servers that later tests use); `return 1` in a body fails the test.
test_eval_() {
	eval "$1"
}

# test_run_ BODY: run the body, then its test_when_finished commands; the body's status, or
# the first failing cleanup's. The output goes to $TRASH/.out, or to stderr with -v.
test_run_() {
	test_in_body=t
	test_when_finished_cmds=
	if [ -n "$verbose" ]; then
		test_eval_ "$1" >&2 2>&1
	else
		test_eval_ "$1" >"$TRASH/.out" 2>&1
	fi
	_test_ret=$?
	test_in_body=
	if [ -n "$test_when_finished_cmds" ] && { [ -z "$immediate" ] || [ $_test_ret = 0 ]; }; then
		if [ -n "$verbose" ]; then
			test_eval_ "$test_when_finished_cmds" >&2 2>&1
		else
			test_eval_ "$test_when_finished_cmds" >>"$TRASH/.out" 2>&1
		fi
	fi
	test_when_finished_cmds=
	return $_test_ret
}

# test_ok_ TITLE / test_failed_ TITLE: report a test's result; with -i a failure ends the script.
test_ok_() { echo "ok $test_count - $1"; }
test_failed_() {
	test_failures=$((test_failures + 1))
	echo "not ok $test_count - $1"
	[ -n "$verbose" ] || sed 's/^/#   /' "$TRASH/.out"
	if [ -n "$immediate" ]; then
		echo "1..$test_count"
		echo "# -i: stopped at the first failing test" >&2
		test_keep_trash=t
		exit 1
	fi
}

test_expect_success() {
	test_count=$((test_count + 1))
	[ -z "$verbose" ] || printf '\n# expecting success %d - %s:%s\n' "$test_count" "$1" "$2" >&2
	# chain commands with &&.
	if test_run_ "$2"; then
		test_ok_ "$1"
	else
		test_failed_ "$1"
	fi
}

# test_expect_code CODE 'title' 'commands': the commands' exit status must be CODE. They run
# in a subshell (so that they may exit); test_when_finished is not available there.
test_expect_code() {
	test_count=$((test_count + 1))
	[ -z "$verbose" ] || printf '\n# expecting exit %s %d - %s:%s\n' "$1" "$test_count" "$2" "$3" >&2
	if [ -n "$verbose" ]; then
		( eval "$3" ) >&2 2>&1
	else
		( eval "$3" ) >"$TRASH/.out" 2>&1
	fi
	rc=$?
	if [ "$rc" = "$1" ]; then
		test_ok_ "$2"
	else
		test_failed_ "$2 (exit $rc, want $1)"
	fi
}

test_skip_all() { echo "1..0 # SKIP $1"; exit 0; }

# test_have_dataset: skip the whole test when Fashion-MNIST is not installed.
test_have_dataset() {
	[ -f "${GEM_DATA_PATH:-/usr/share/datasets}/fashion-mnist/train-labels-idx1-ubyte.gz" ] ||
		test_skip_all "fashion-mnist not installed (make deps)"
}

# wait_for_file FILE [SECONDS]: wait until FILE exists and is not empty.
wait_for_file() {
	i=0
	while [ ! -s "$1" ]; do
		i=$((i + 1))
		[ $i -gt $((${2:-20} * 10)) ] && return 1
		sleep 0.1
	done
}

# health_version [URL]: the version the server at URL (default $URL) reports in GET /v1/health;
# nothing when it does not answer.
health_version() {
	curl -s "${1:-$URL}/v1/health" | sed -n 's/.*"version": *\([0-9]*\).*/\1/p'
}

# wait_until 'COMMANDS' [SECONDS]: poll until COMMANDS succeed.
wait_until() {
	_i=0
	until eval "$1"; do
		_i=$((_i + 1))
		[ $_i -gt $((${2:-20} * 50)) ] && return 1
		sleep 0.02
	done
}

# tcp_connected PID PORT: PID has an established TCP connection to port PORT (from
# /proc/net/tcp{,6} and PID's descriptors: no ss or netstat needed). A client that has
# connected has sent its request too, which a stopped server's kernel queues unread.
tcp_connected() {
	_inodes=$(ls -l "/proc/$1/fd" 2>/dev/null | sed -n 's/.*socket:\[\([0-9]*\)\]$/\1/p' | tr '\n' ' ')
	[ -n "$_inodes" ] || return 1
	awk -v port="$(printf '%04X' "$2")" -v inodes=" $_inodes" '
		$4 == "01" && substr($3, index($3, ":") + 1) == port && index(inodes, " " $10 " ") { f = 1 }
		END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# wait_connected PID PORT [SECONDS]: wait (default 20 s) until tcp_connected PID PORT.
wait_connected() {
	wait_until "tcp_connected $1 $2" "${3:-20}"
}

# wait_stalled 'COMMAND' [HOLD] [SECONDS]: wait (default 20 s) until COMMAND prints the same
# non-empty output for HOLD seconds (default 0.5): a process that has stopped making progress,
# for example a node whose peer is gone. HOLD must be far longer than one step of it.
wait_stalled() {
	_last= _since=$(date +%s.%N) _t0=$_since
	while :; do
		_now=$(date +%s.%N) _cur=$(eval "$1")
		if [ -z "$_cur" ] || [ "$_cur" != "$_last" ]; then
			_last=$_cur _since=$_now
		elif awk -v a="$_since" -v b="$_now" -v h="${2:-0.5}" 'BEGIN { exit !(b - a >= h) }'; then
			return 0
		fi
		awk -v a="$_t0" -v b="$_now" -v t="${3:-20}" 'BEGIN { exit !(b - a > t) }' && return 1
		sleep 0.02
	done
}

# wait_for_joins RUNDIR N: wait (30 s at most) until N workers have joined RUNDIR's server.
wait_for_joins() {
	i=0
	until [ "$(grep -c '"event":"join"' "$1/log.jsonl" 2>/dev/null)" -ge "$2" ] 2>/dev/null; do
		i=$((i + 1))
		[ $i -le 300 ] || return 1
		sleep 0.1
	done
}

# make_tiny_data DIR: a small learnable IDX dataset (class = the bright quarter of an 8x8
# image; 2000 training and 500 test samples) and tiny.json, a 64-16-4 model for it.
make_tiny_data() {
	python3 - "$1" <<'PY'
import gzip, random, struct, sys, os
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
random.seed(7)
def write(split, n):
    imgs, labs = bytearray(), bytearray()
    for _ in range(n):
        c = random.randrange(4); px = bytearray(64)
        for r in range(8):
            for q in range(8):
                inq = (r // 4) * 2 + (q // 4) == c
                px[r * 8 + q] = random.randrange(150, 256) if inq else random.randrange(0, 100)
        imgs += px; labs.append(c)
    with gzip.open(f"{d}/{split}-images-idx3-ubyte.gz", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 8, 8) + imgs)
    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labs)
write("train", 2000); write("t10k", 500)
PY
	cat >tiny.json <<'JSON'
{"name":"tiny","input":[64],"classes":4,"layers":[
 {"type":"dense","out":16},{"type":"relu"},{"type":"dense","out":4},{"type":"logsoftmax"}]}
JSON
}

# make_fake_ssh DIR: DIR/ssh, an ssh that drops its options and host and runs the command
# here; it appends the host to $FAKE_SSH_LOG, the command to $FAKE_SSH_LOG.cmd and all its
# arguments to $FAKE_SSH_LOG.args.
make_fake_ssh() {
	mkdir -p "$1" &&
	cat >"$1/ssh" <<-\EOF &&
	#!/bin/sh
	[ -z "$FAKE_SSH_LOG" ] || echo "$*" >>"$FAKE_SSH_LOG.args"
	while [ $# -gt 0 ]; do
		case $1 in
		-[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
		-*) shift ;;
		*) break ;;
		esac
	done
	echo "$1" >>"$FAKE_SSH_LOG"
	shift
	echo "$*" >>"$FAKE_SSH_LOG.cmd"
	exec sh -c "$*"
	EOF
	chmod +x "$1/ssh"
}

# self_signed NAME: NAME.crt and NAME.key, a certificate for 127.0.0.1 and localhost, its own CA
self_signed() {
	openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=localhost \
		-addext "subjectAltName=IP:127.0.0.1,DNS:localhost" \
		-keyout "$1.key" -out "$1.crt" 2>/dev/null
}

# exits CODE COMMAND...: COMMAND must exit with CODE
exits() {
	_want=$1; shift
	"$@"; _rc=$?
	[ "$_rc" = "$_want" ] || { echo "exit $_rc, want $_want: $*"; return 1; }
}

# expect_error STATUS ERROR [curl args...]: curl's request is answered with HTTP STATUS and a
# JSON error ERROR with a detail; the reply is left in reply.json.
expect_error() {
	_status=$1 _error=$2; shift 2
	_got=$(curl -s -o reply.json -w "%{http_code}" "$@") &&
	echo "status $_got: $(head -1 reply.json | tr -d "\\000")" &&
	test "$_got" = "$_status" &&
	python3 -c "import json; r=json.load(open(\"reply.json\")); assert r[\"error\"]==\"$_error\" and r[\"detail\"], r"
}

# start_server RUNDIR [gem-serve options]: start gem-serve on a free port; sets URL and
# SERVER_PID; the server is killed when the test exits.
start_server() {
	_dir=$1; shift
	rm -f "$_dir/server.url"
	gem-serve --listen 127.0.0.1:0 "$@" "$_dir" >"$_dir/serve.out" 2>"$_dir/serve.err" &
	SERVER_PID=$!
	test_bg $SERVER_PID
	wait_for_file "$_dir/server.url" 20 || { cat "$_dir/serve.err"; return 1; }
	URL=$(cat "$_dir/server.url")
}

# start_fake_server [--polls FILE] RUN_JSON [PARAMS]: start t/fake-serve.py (GET /v1/health,
# /v1/run and /v1/params from files, no long polls) on a free port; sets FAKE_URL and
# FAKE_PID; it is killed when the test exits.
start_fake_server() {
	rm -f fake.out
	python3 -u "$GEM_SRC/t/fake-serve.py" "$@" >fake.out 2>fake.err &
	FAKE_PID=$!
	test_bg $FAKE_PID
	wait_for_file fake.out 20 || { cat fake.err; return 1; }
	FAKE_URL=http://127.0.0.1:$(cat fake.out)
}

# wait_exit PID [SECONDS]: wait for a child to exit, at most SECONDS (default 30); a child
# still running then is killed and the wait fails. Returns the child's status.
wait_exit() {
	_i=0
	while kill -0 "$1" 2>/dev/null; do
		_i=$((_i + 1))
		if [ $_i -gt $((${2:-30} * 20)) ]; then
			echo "wait_exit: $1 still running after ${2:-30} s: killed"
			kill -9 "$1"
			wait "$1"
			return 124
		fi
		sleep 0.05
	done
	wait "$1"
}

# stop_if_running PID...: for test_when_finished: SIGTERM to each PID still running (a server
# then checkpoints and removes server.url) and wait for it, SIGKILL after 10 s. Succeeds.
stop_if_running() {
	for _p in "$@"; do
		# a zombie (another process's child, not yet reaped) is not running
		case $(ps -o stat= -p "$_p" 2>/dev/null) in "" | Z*) continue ;; esac
		if kill -0 "$_p" 2>/dev/null; then
			echo "stop_if_running: $_p still running: SIGTERM"
			kill -TERM "$_p" 2>/dev/null
			wait_exit "$_p" 10
		fi
	done
	return 0
}

# stop_server: POST /v1/stop and wait for the server to exit; its status is returned.
stop_server() {
	curl -s -X POST ${TOKEN:+-H "Authorization: Bearer $TOKEN"} "$URL/v1/stop" >/dev/null
	wait_exit $SERVER_PID
}

test_done() {
	echo "1..$test_count"
	[ "$test_failures" = 0 ]
	exit $?
}
