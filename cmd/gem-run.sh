#!/bin/bash
# gem-run: make a run, serve it, train it with N workers, evaluate it, stop the server; or, with
# --rule sgp, train it with N SGP nodes wired to each other (no server) and evaluate their average.
# Killing gem-run (Ctrl-C) stops everything it started.
set -u

usage_line="usage: gem-run -n N [--hosts FILE] [--resume] [gem-init options] RUNDIR
   or: gem-run -n N --rule sgp [--hosts FILE] [--work-opt OPT] [gem-init options] RUNDIR"
usage() {
	cat <<USAGE
$usage_line
Make a run with gem-init, start gem-serve on a free port, start N gem-work workers
(locally, or over ssh on the hosts of --hosts), wait for them, evaluate the result with
gem-eval, stop the server and print gem-eval's TSV. With --rule sgp there is no server: N gem-work nodes of Stochastic Gradient
Push train on disjoint shards, wired to each other on free ports, and gem-eval --nodes
evaluates each node and their average.

  -n, --workers N     number of workers; default 4, or with --hosts the slots listed
      --hosts FILE    start the workers over ssh: one "host [slots]" per line; the server
                      listens on every address (--public) behind a fresh token, and the
                      workers reach it by this host's name (\$GEM_HOST overrides it)
      --listen H:P    where gem-serve listens; default 127.0.0.1:0 (with --hosts: 0.0.0.0:0)
      --tls           serve HTTPS: a certificate made for this run (openssl) in RUNDIR, copied
                      to the hosts of --hosts; the workers trust it alone (gem-work --cacert);
                      the default with --hosts (not with --rule sgp)
      --no-tls        plain HTTP with --hosts (the token then crosses the network in clear)
      --resume        continue the run in RUNDIR instead of making a new one
      --work-opt OPT  pass OPT to every gem-work (repeatable), e.g. --work-opt=--slowdown=2;
                      with --rule sgp e.g. --work-opt=--overlap, --work-opt=--topology=ring
      --serve-opt OPT pass OPT to gem-serve (repeatable), e.g. --serve-opt=--max-updates=100
      --codec C       every gem-work's --codec (raw, zlib, zlib+shuffle, fp16); default raw
      --rule sgp      train with SGP nodes instead of a server (other rules go to gem-init)
  -q, --quiet         no progress
  -h, --help          show this help
  -V, --version       show the version
Every other option goes to gem-init (see gem-init --help); --workers N is passed on too.
USAGE
}

die_usage() { echo "gem-run: $*" >&2; echo "$usage_line" >&2; exit 2; }

# ssh gives up on a host that does not answer, and notices one that hangs, instead of waiting
# forever (GEM_SSH_TIMEOUT: seconds to connect; default 10)
ssh_opts=(-o BatchMode=yes -o "ConnectTimeout=${GEM_SSH_TIMEOUT:-10}" -o ServerAliveInterval=15
	  -o ServerAliveCountMax=4)
workers=4 workers_set=0 hosts= listen= resume=0 tls= quiet=0 initopts=() workopts=() serveopts=() rundir= sgp=0
while [ $# -gt 0 ]; do
	case "$1" in
	-n|--workers) [ $# -ge 2 ] || die_usage "$1 needs a value"; workers=$2; workers_set=1; shift ;;
	--workers=*) workers=${1#*=}; workers_set=1 ;;
	--hosts) [ $# -ge 2 ] || die_usage "$1 needs a value"; hosts=$2; shift ;;
	--hosts=*) hosts=${1#*=} ;;
	--listen) [ $# -ge 2 ] || die_usage "$1 needs a value"; listen=$2; shift ;;
	--listen=*) listen=${1#*=} ;;
	--resume) resume=1 ;;
	--tls) tls=1 ;;
	--no-tls) tls=0 ;;
	--work-opt) [ $# -ge 2 ] || die_usage "$1 needs a value"; workopts+=("$2"); shift ;;
	--work-opt=*) workopts+=("${1#*=}") ;;
	--serve-opt) [ $# -ge 2 ] || die_usage "$1 needs a value"; serveopts+=("$2"); shift ;;
	--serve-opt=*) serveopts+=("${1#*=}") ;;
	--codec) [ $# -ge 2 ] || die_usage "$1 needs a value"; workopts+=("--codec=$2"); shift ;;
	--codec=*) workopts+=("$1") ;;
	-r|--rule) [ $# -ge 2 ] || die_usage "$1 needs a value"
		if [ "$2" = sgp ]; then sgp=1; else initopts+=("$1" "$2"); fi; shift ;;
	--rule=*) if [ "${1#*=}" = sgp ]; then sgp=1; else initopts+=("$1"); fi ;;
	-q|--quiet) quiet=1 ;;
	-h|--help) usage; exit 0 ;;
	-V|--version) echo "gem-run @GEM_VERSION@"; exit 0 ;;
	--) shift; break ;;
	-*)
		# a gem-init option, with its value when it takes one
		case "$1" in
		--nesterov|--force|-f) initopts+=("$1") ;;
		--*=*) initopts+=("$1") ;;
		*) [ $# -ge 2 ] || die_usage "$1 needs a value"; initopts+=("$1" "$2"); shift ;;
		esac ;;
	*) [ -z "$rundir" ] || die_usage "more than one RUNDIR"; rundir=$1 ;;
	esac
	shift
done
[ $# -eq 0 ] || { [ -z "$rundir" ] && [ $# -eq 1 ] && rundir=$1; } || die_usage "unexpected arguments: $*"
[ -n "$rundir" ] || die_usage "no RUNDIR given"
case "$workers" in ''|*[!0-9]*|0) die_usage "-n: not a positive integer: $workers" ;; esac

bindir=$(cd "$(dirname "$0")" && pwd)
PATH="$bindir:$PATH"

# The hosts, one entry per worker slot; with --hosts, N defaults to the slots in the file.
slots=()
if [ -n "$hosts" ]; then
	[ -r "$hosts" ] || die_usage "--hosts: cannot read $hosts"
	while read -r h n _; do
		case "$h" in ''|'#'*) continue ;; esac
		for ((i = 0; i < ${n:-1}; i++)); do slots+=("$h"); done
	done <"$hosts"
	[ ${#slots[@]} -gt 0 ] || die_usage "--hosts: no hosts in $hosts"
	[ $workers_set = 1 ] || workers=${#slots[@]}
	[ -n "$listen" ] || listen=0.0.0.0:0
fi
[ -n "$listen" ] || listen=127.0.0.1:0

# SGP: N nodes and no server. The handshake: each node binds a free port (--listen HOST:0)
# and prints its URL on stdout, which goes to RUNDIR/node-I.url; once every node has printed
# one, gem-run writes the peer list (one URL per line, node order) to RUNDIR/peers by a rename,
# which the nodes wait for (--peers-file); they then check with each other that they run the
# same topology (hello) and start. With --hosts, each host gets a copy of the run (run.json,
# params.gem, the token) at the same path, the peer list, and gives back its node files.
sgp_run() {
	local i j h port u nodes=() failed=0 ok marker copy_hosts=()
	cleanup_sgp() {
		trap - INT TERM EXIT
		for p in "${nodes[@]}"; do kill "$p" 2>/dev/null; done
		wait 2>/dev/null
	}
	trap 'echo "gem-run: interrupted; stopping" >&2; cleanup_sgp; exit 130' INT
	trap 'echo "gem-run: terminated; stopping" >&2; cleanup_sgp; exit 143' TERM
	trap cleanup_sgp EXIT
	case "$listen" in *:0) ;; *) die_usage "--listen: with --rule sgp the port must be 0 (each node picks a free one)" ;; esac
	gem-init -q --workers "$workers" "${initopts[@]}" "$rundir" || exit $?
	rm -f "$rundir"/node-*.url "$rundir"/node-*.gem "$rundir"/node-*.jsonl "$rundir"/node-*.log "$rundir/peers"
	# on other hosts the run is at the same absolute path (a relative one would resolve
	# against the remote $HOME, possibly into another run)
	local public=() token=() rrun
	rrun=$(cd "$rundir" && pwd) || exit 1
	case "$listen" in 127.*|localhost:*|\[::1\]:*) ;; *) public=(--public) ;; esac
	if [ -n "$hosts" ] || [ ${#public[@]} -gt 0 ]; then
		# reachable from the network: a fresh token (a public listener needs one)
		(umask 077 && head -c 24 /dev/urandom | base64 >"$rundir/token") || exit 1
		token=(--token-file "$rundir/token")
	fi
	if [ -n "$hosts" ]; then
		# a host that sees this marker shares the run directory: nothing to copy there
		marker=".gem-run-marker-$$"
		: >"$rundir/$marker"
		copy_hosts=()
		for h in $(printf '%s\n' "${slots[@]}" | sort -u); do
			ssh "${ssh_opts[@]}" "$h" test -e "$rrun/$marker" </dev/null && continue
			copy_hosts+=("$h")
			ssh "${ssh_opts[@]}" "$h" mkdir -p "$rrun" </dev/null &&
				scp -q "${ssh_opts[@]}" "$rundir/run.json" "$rundir/params.gem" "$rundir/token" "$h:$rrun/" ||
				{ echo "gem-run: cannot copy the run to $h" >&2; exit 1; }
		done
		rm -f "$rundir/$marker"
	fi
	[ $quiet = 1 ] || echo "gem-run: $rundir: starting $workers SGP nodes" >&2
	for ((i = 0; i < workers; i++)); do
		if [ ${#slots[@]} -gt 0 ]; then
			h=${slots[$((i % ${#slots[@]}))]}
			ssh "${ssh_opts[@]}" "$h" gem-work -q --rule sgp --run "$rrun" --listen "$listen" \
				"${public[@]}" ${token[@]:+--token-file "$rrun/token"} --node "$i" \
				--peers-file "$rrun/peers" "${workopts[@]}" \
				</dev/null >"$rundir/node-$i.url" 2>"$rundir/node-$i.log" &
		else
			gem-work -q --rule sgp --run "$rundir" --listen "$listen" "${public[@]}" "${token[@]}" \
				--node "$i" --peers-file "$rundir/peers" "${workopts[@]}" \
				</dev/null >"$rundir/node-$i.url" 2>"$rundir/node-$i.log" &
		fi
		nodes+=($!)
	done
	# every node's URL (a whole line), or a node that died trying
	: >"$rundir/peers.tmp"
	for ((i = 0; i < workers; i++)); do
		ok=0
		for ((j = 0; j < 600; j++)); do
			if [ "$(wc -l <"$rundir/node-$i.url")" -ge 1 ]; then ok=1; break; fi
			kill -0 "${nodes[$i]}" 2>/dev/null || break
			sleep 0.1
		done
		[ $ok = 1 ] || { echo "gem-run: node $i did not start:" >&2; tail -3 "$rundir/node-$i.log" >&2; exit 1; }
		u=$(head -1 "$rundir/node-$i.url")
		if [ ${#slots[@]} -gt 0 ]; then
			# a node listening on every address is reached by its host's name
			port=${u##*:}
			u="http://${slots[$((i % ${#slots[@]}))]}:$port"
		fi
		echo "$u" >>"$rundir/peers.tmp"
	done
	mv "$rundir/peers.tmp" "$rundir/peers" || exit 1
	if [ -n "$hosts" ]; then
		for h in "${copy_hosts[@]}"; do
			scp -q "${ssh_opts[@]}" "$rundir/peers" "$h:$rrun/peers.tmp" &&
				ssh "${ssh_opts[@]}" "$h" mv "$rrun/peers.tmp" "$rrun/peers" ||
				{ echo "gem-run: cannot send the peer list to $h" >&2; exit 1; }
		done
	fi
	for i in "${!nodes[@]}"; do
		wait "${nodes[$i]}" || { failed=$((failed + 1)); echo "gem-run: node $i failed:" >&2; tail -3 "$rundir/node-$i.log" >&2; }
	done
	nodes=()
	if [ -n "$hosts" ]; then
		for ((i = 0; i < workers; i++)); do
			h=${slots[$((i % ${#slots[@]}))]}
			case " ${copy_hosts[*]} " in *" $h "*) ;; *) continue ;; esac
			scp -q "${ssh_opts[@]}" "$h:$rrun/node-$i.gem" "$h:$rrun/node-$i.jsonl" "$rundir/" 2>/dev/null
		done
	fi
	[ $failed = 0 ] || { echo "gem-run: $failed of $workers node$([ "$workers" = 1 ] || echo s) failed" >&2; exit 1; }
	gem-eval --nodes "$rundir" || exit 1
	exit 0
}

# The run's certificate to every host of --hosts that does not share RUNDIR, at the same path.
copy_cert() {
	local h marker=".gem-run-marker-$$" rrun
	rrun=$(cd "$rundir" && pwd) || return 1
	: >"$rundir/$marker"
	for h in $(printf '%s\n' "${slots[@]}" | sort -u); do
		ssh "${ssh_opts[@]}" "$h" test -e "$rrun/$marker" </dev/null && continue
		ssh "${ssh_opts[@]}" "$h" mkdir -p "$rrun" </dev/null &&
			scp -q "${ssh_opts[@]}" "$rundir/tls-cert.pem" "$h:$rrun/" ||
			{ rm -f "$rundir/$marker"; echo "gem-run: cannot copy the certificate to $h" >&2; return 1; }
	done
	rm -f "$rundir/$marker"
}

if [ $sgp = 1 ]; then
	[ "$tls" != 1 ] || die_usage "--tls: not with --rule sgp (SGP nodes speak plain HTTP)"
	[ $resume = 0 ] || die_usage "--resume: not with --rule sgp (an SGP run starts from params.gem)"
	sgp_run
	exit $?
fi

pids=() server=
# The server goes first: it checkpoints and answers the workers still running, remote ones
# too, that the run is over (410), so they leave; then what is left here is stopped.
cleanup() {
	trap - INT TERM EXIT
	if [ -n "$server" ]; then
		kill "$server" 2>/dev/null
		for ((j = 0; j < 100; j++)); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
	fi
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
}
trap 'echo "gem-run: interrupted; stopping" >&2; cleanup; exit 130' INT
trap 'echo "gem-run: terminated; stopping" >&2; cleanup; exit 143' TERM
trap cleanup EXIT

if [ $resume = 0 ]; then
	gem-init -q --workers "$workers" "${initopts[@]}" "$rundir" || exit $?
elif [ ${#initopts[@]} -gt 0 ]; then
	die_usage "--resume takes no gem-init options"
fi

# the name workers on other hosts reach the server by
server_host=${GEM_HOST:-$(hostname -f 2>/dev/null || hostname)}
tlsopts=() cacert=()
# over the network the token travels in HTTPS by default
[ -n "$tls" ] || { [ -n "$hosts" ] && tls=1 || tls=0; }
if [ $tls = 1 ]; then
	# a certificate for this run, for this host's name and the loopback; workers trust it alone
	case "$server_host" in *[!0-9.]*) san="DNS:$server_host" ;; *) san="IP:$server_host" ;; esac
	(umask 077 && openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=$server_host" \
		-addext "subjectAltName=$san,DNS:localhost,IP:127.0.0.1" \
		-keyout "$rundir/tls-key.pem" -out "$rundir/tls-cert.pem" 2>"$rundir/openssl.err") ||
		{ cat "$rundir/openssl.err" >&2; echo "gem-run: openssl could not make a certificate" >&2; exit 1; }
	tlsopts=(--tls-cert "$rundir/tls-cert.pem" --tls-key "$rundir/tls-key.pem")
	# at its absolute path: a worker on another host finds it where copy_cert put it
	cacert=(--cacert "$(cd "$rundir" && pwd)/tls-cert.pem")
	[ -z "$hosts" ] || copy_cert || exit 1
fi
public=()
case "$listen" in 127.*|localhost:*|\[::1\]:*) ;; *) public=(--public) ;; esac
token=()
if [ -n "$hosts" ] || [ ${#public[@]} -gt 0 ]; then
	# workers come over the network (a public listener needs a token): a fresh token, which
	# travels on ssh's standard input
	(umask 077 && head -c 24 /dev/urandom | base64 >"$rundir/token") || exit 1
	token=(--token-file "$rundir/token")
fi
rm -f "$rundir/server.url"
gem-serve --listen "$listen" "${public[@]}" "${token[@]}" "${tlsopts[@]}" "${serveopts[@]}" "$rundir" >/dev/null 2>"$rundir/serve.err" &
server=$!
for ((i = 0; i < 300; i++)); do
	[ -s "$rundir/server.url" ] && break
	kill -0 "$server" 2>/dev/null || { cat "$rundir/serve.err" >&2; echo "gem-run: gem-serve failed" >&2; exit 1; }
	sleep 0.1
done
[ -s "$rundir/server.url" ] || { echo "gem-run: gem-serve did not start" >&2; exit 1; }
url=$(cat "$rundir/server.url")
if [ -n "$hosts" ]; then
	# workers on other hosts reach the server by this host's name
	url="${url%%://*}://$server_host:${url##*:}"
fi

[ $quiet = 1 ] || echo "gem-run: $rundir served at $url; starting $workers workers" >&2
for ((i = 0; i < workers; i++)); do
	if [ ${#slots[@]} -gt 0 ]; then
		h=${slots[$((i % ${#slots[@]}))]}
		ssh "${ssh_opts[@]}" "$h" gem-work -q --server "$url" --worker-id "$i" --token-file /dev/stdin "${cacert[@]}" "${workopts[@]}" \
			<"$rundir/token" >>"$rundir/worker-$i.log" 2>&1 &
	else
		gem-work -q --server "$url" --worker-id "$i" "${token[@]}" "${cacert[@]}" "${workopts[@]}" >>"$rundir/worker-$i.log" 2>&1 &
	fi
	pids+=($!)
done

# Progress: the server's version, once a second, while the workers run.
if [ $quiet = 0 ] && [ -t 2 ] && command -v curl >/dev/null; then
	(
		start=$(date +%s)
		while sleep 1; do
			v=$(curl -s --max-time 1 ${cacert[@]:+--cacert "$rundir/tls-cert.pem"} "${url}/v1/health" | sed -n 's/.*"version": *\([0-9]*\).*/\1/p')
			[ -n "$v" ] || break
			printf '\rgem-run: version %s, %d s   ' "$v" $(($(date +%s) - start)) >&2
		done
	) &
	progress=$!
fi

failed=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { failed=$((failed + 1)); echo "gem-run: worker $i failed:" >&2; tail -3 "$rundir/worker-$i.log" >&2; }
done
pids=()
# every worker has left: the server stops by itself and writes its final checkpoint
for ((i = 0; i < 100; i++)); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
kill "$server" 2>/dev/null
wait "$server"
server=
[ -n "${progress:-}" ] && { kill "$progress" 2>/dev/null; wait "$progress" 2>/dev/null; echo >&2; }
if [ $failed != 0 ]; then
	# no TSV: it would read as the run's result
	echo "gem-run: $failed of $workers worker$([ "$workers" = 1 ] || echo s) failed; the server checkpointed at version" \
		"$(sed -n '1s/.*"version":\([0-9]*\).*/\1/p' "$rundir/params.gem")" >&2
	echo "gem-run: gem-run --resume -n $workers $rundir continues the run" >&2
	exit 1
fi
gem-eval "$rundir" || exit 1
exit 0
