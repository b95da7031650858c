#!/bin/sh
# ssh.sh: a gem run with workers on other hosts, started over ssh. This host makes the run
# and serves it on every address (gem-serve --public) behind a fresh bearer token; one
# gem-work is started over ssh per slot of HOSTS ("host [slots]" per line, # comments);
# when they have all finished, the server is stopped and gem-eval prints the test loss and
# accuracy (TSV). The token travels on ssh's standard input, never on a command line.
# Every host needs gem in the PATH of its ssh shell and the dataset (same directory, or
# under GEM_DATA_PATH); ssh must log in without a password (BatchMode).
#
#   sh ssh.sh HOSTS RUNDIR [gem-init options]
#   printf 'node2 4\nnode3 4\n' > hosts; sh share/gem/examples/ssh.sh hosts run/ --model cnn
#
# Environment:
#   GEM_HOST  the name or address by which the workers reach this host; default
#             `hostname -f`
#   GEM_PORT  the port the server listens on; default 0, a free one
#   SSH       the ssh command; default ssh
#
# Exit status: 0 when every worker finished, 1 when a program failed, 2 on bad usage.
# Interrupted, it stops the server (which checkpoints) and the local ssh processes; a
# remote worker then gives up once the server has been unreachable for its --retry-for.
set -eu

usage() {
	echo "usage: ssh.sh HOSTS RUNDIR [gem-init options]" >&2
	exit 2
}
[ $# -ge 2 ] || usage
hosts=$1 run=$2
shift 2
[ -r "$hosts" ] || { echo "ssh.sh: cannot read $hosts" >&2; usage; }

# One line per worker slot.
slots=$(awk '$1 !~ /^(#|$)/ { n = ($2 == "" ? 1 : $2); for (i = 0; i < n; i++) print $1 }' "$hosts")
n=$(echo "$slots" | grep -c . || :)
[ "$n" -gt 0 ] || { echo "ssh.sh: no hosts in $hosts" >&2; usage; }

gem-init -q --workers "$n" "$@" "$run"
(umask 077 && head -c 24 /dev/urandom | base64 >"$run/token")

rm -f "$run/server.url"
gem-serve --keep-running --listen "0.0.0.0:${GEM_PORT:-0}" --public --token-file "$run/token" "$run" \
	>/dev/null 2>"$run/serve.err" &
server=$!
pids=
trap 'kill $pids $server 2>/dev/null; wait; exit 130' INT TERM

i=0
while [ ! -s "$run/server.url" ]; do
	kill -0 $server 2>/dev/null && [ $i -lt 300 ] || {
		cat "$run/serve.err" >&2
		echo "ssh.sh: gem-serve did not start" >&2
		exit 1
	}
	i=$((i + 1))
	sleep 0.1
done
port=$(sed 's/.*://' "$run/server.url")
url="http://${GEM_HOST:-$(hostname -f 2>/dev/null || hostname)}:$port"
echo "ssh.sh: $run served at $url; starting $n workers" >&2

i=0
for h in $slots; do
	${SSH:-ssh} -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15 -o ServerAliveCountMax=4 \
		"$h" gem-work -q --server "$url" --token-file /dev/stdin \
		<"$run/token" >"$run/worker-$i.log" 2>&1 &
	pids="$pids $!"
	i=$((i + 1))
done

failed=0
i=0
for p in $pids; do
	st=0
	wait "$p" || st=$?
	[ $st = 0 ] || {
		failed=$((failed + 1))
		echo "ssh.sh: worker $i on $(echo "$slots" | sed -n "$((i + 1))p") failed" \
			"(exit status $st):" >&2
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
[ $rc = 0 ] || [ $rc = 143 ] || { cat "$run/serve.err" >&2; echo "ssh.sh: gem-serve failed" >&2; exit 1; }
# no TSV when a worker failed: it would read as the run's result
[ $failed = 0 ] || {
	echo "ssh.sh: $failed of $n workers failed; the server checkpointed what they did" >&2
	exit 1
}
gem-eval "$run"
