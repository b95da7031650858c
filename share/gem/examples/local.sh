#!/bin/sh
# local.sh: a gem run by hand on this machine, the steps gem-run(1) takes in one command:
# gem-init makes the run, gem-serve serves it on a free loopback port, N gem-work workers
# train it; when they are done the server is stopped (it checkpoints) and gem-eval prints
# the test loss and accuracy (TSV). Each worker's messages go to RUNDIR/worker-I.log, the
# server's to RUNDIR/serve.err. gem's programs must be in PATH.
#
#   sh local.sh N RUNDIR [gem-init options]
#   sh share/gem/examples/local.sh 4 run/ --model cnn --rule gem --lr 0.05 --epochs 1
#
# Exit status: 0 when every worker finished, 1 when a program failed, 2 on bad usage.
set -eu

usage() {
	echo "usage: local.sh N RUNDIR [gem-init options]" >&2
	exit 2
}
[ $# -ge 2 ] || usage
n=$1 run=$2
shift 2
case $n in '' | *[!0-9]* | 0) usage ;; esac

gem-init -q --workers "$n" "$@" "$run"

rm -f "$run/server.url"
gem-serve --keep-running --listen 127.0.0.1:0 "$run" >/dev/null 2>"$run/serve.err" &
server=$!
pids=
# Ctrl-C stops the workers and the server; the server checkpoints first.
trap 'kill $pids $server 2>/dev/null; wait; exit 130' INT TERM

i=0
while [ ! -s "$run/server.url" ]; do
	kill -0 $server 2>/dev/null && [ $i -lt 300 ] || {
		cat "$run/serve.err" >&2
		echo "local.sh: gem-serve did not start" >&2
		exit 1
	}
	i=$((i + 1))
	sleep 0.1
done
url=$(cat "$run/server.url")
echo "local.sh: $run served at $url; starting $n workers" >&2

i=0
while [ $i -lt "$n" ]; do
	gem-work -q --server "$url" >"$run/worker-$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

failed=0
i=0
for p in $pids; do
	wait "$p" || {
		failed=$((failed + 1))
		echo "local.sh: worker $i failed:" >&2
		tail -3 "$run/worker-$i.log" >&2
	}
	i=$((i + 1))
done
pids=
# Every worker is done: stop the server, which writes its final checkpoint. (It runs with
# --keep-running: by itself it would stop as soon as the workers that have joined are done,
# which a fast worker can be before a slow one has joined.)
kill $server 2>/dev/null || :
# stopped by our TERM, it checkpoints and exits 143
rc=0
wait $server || rc=$?
[ $rc = 0 ] || [ $rc = 143 ] || { cat "$run/serve.err" >&2; echo "local.sh: gem-serve failed" >&2; exit 1; }
gem-eval "$run"
[ $failed = 0 ] || { echo "local.sh: $failed of $n workers failed" >&2; exit 1; }
