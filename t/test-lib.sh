# test-lib.sh: gem's shell test library (in the manner of git's t/test-lib.sh).
# A test sources it, calls test_expect_success 'title' 'commands' as often as it needs,
# then test_done. Each test runs in a fresh trash directory; programs come from $GEM_BIN.
# Processes a test starts in the background are registered with test_bg and killed at exit,
# also when the test fails.

: "${GEM_SRC:=$(cd "$(dirname "$0")/.." && pwd)}"
: "${GEM_BIN:=$GEM_SRC/bin}"
export GEM_SRC GEM_BIN
PATH="$GEM_BIN:$PATH"
export PATH
GEM_SHARE_DIR="$GEM_SRC/share/gem"
export GEM_SHARE_DIR

test_count=0
test_failures=0
test_bg_pids=
TEST_NAME=$(basename "$0" .sh)
TRASH="${TMPDIR:-/tmp}/gem-test.$TEST_NAME.$$"
rm -rf "$TRASH" && mkdir -p "$TRASH" || exit 1
cd "$TRASH" || exit 1

test_cleanup() {
	for p in $test_bg_pids; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	cd / && rm -rf "$TRASH"
}
trap test_cleanup EXIT
trap 'exit 130' INT TERM

# test_bg PID: kill PID when the test script exits.
test_bg() { test_bg_pids="$test_bg_pids $1"; }

test_expect_success() {
	test_count=$((test_count + 1))
	# evaluated in this shell (as git's test-lib does), so a test can set variables and
	# start servers that later tests use and wait for; chain commands with &&.
	if eval "$2" >"$TRASH/.out" 2>&1; then
		echo "ok $test_count - $1"
	else
		test_failures=$((test_failures + 1))
		echo "not ok $test_count - $1"
		sed 's/^/#   /' "$TRASH/.out"
	fi
}

# test_expect_code CODE 'title' 'commands': the commands' exit status must be CODE.
test_expect_code() {
	test_count=$((test_count + 1))
	( eval "$3" ) >"$TRASH/.out" 2>&1
	rc=$?
	if [ "$rc" = "$1" ]; then
		echo "ok $test_count - $2"
	else
		test_failures=$((test_failures + 1))
		echo "not ok $test_count - $2 (exit $rc, want $1)"
		sed 's/^/#   /' "$TRASH/.out"
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
# here; it appends the host to $FAKE_SSH_LOG and the command to $FAKE_SSH_LOG.cmd.
make_fake_ssh() {
	mkdir -p "$1" &&
	cat >"$1/ssh" <<-\EOF &&
	#!/bin/sh
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
