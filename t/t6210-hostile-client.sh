#!/bin/bash
# t6210: a hostile client (t/hostile-client.py) sends every class of bad request to a server
# with a token; after each one the server answers /v1/health and θ moved only by the client's
# honest commits. The script's own TAP lines are this test's.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/test-lib.sh" >/dev/null

# A run that cannot be made or a server that does not start is the product failing: a
# failed test, with what gem-init or gem-serve said.
make_tiny_data data >/dev/null 2>&1 &&
gem-init -q --model tiny.json --data data run 2>init.err &&
head -c 24 /dev/urandom | base64 >token &&
start_server run --keep-running --token-file token >/dev/null 2>start.err || {
	echo "not ok 1 - a run is made and its server starts"
	cat init.err start.err run/serve.err 2>/dev/null | tail -10 | sed 's/^/# /'
	echo "1..1"
	exit 1
}
GEM_TOKEN=$(cat token) python3 "$GEM_SRC/t/hostile-client.py" "$URL"
rc=$?
kill -0 "$SERVER_PID" 2>/dev/null || { echo "# gem-serve died:"; sed 's/^/# /' run/serve.err | tail -5; rc=1; }
TOKEN=$(cat token) stop_server >/dev/null
if grep -qF "$(cat token)" run/serve.err run/log.jsonl run/serve.out; then
	echo "# the token is in the server's output or log"
	rc=1
fi
exit $rc
