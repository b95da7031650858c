#!/bin/bash
# t6210: a hostile client (t/hostile-client.py) sends every class of bad request to a server
# with a token; after each one the server answers /v1/health and θ moved only by the client's
# honest commits. The script's own TAP lines are this test's.
[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
. "$(dirname "$0")/test-lib.sh" >/dev/null

make_tiny_data data >/dev/null 2>&1 &&
gem-init -q --model tiny.json --data data run &&
head -c 24 /dev/urandom | base64 >token &&
start_server run --keep-running --token-file token >/dev/null || {
	echo "1..0 # SKIP the server did not start"
	exit 0
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
