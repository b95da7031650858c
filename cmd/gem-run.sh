#!/bin/bash
# gem-run: make a run, serve it, train it with N workers, evaluate it, stop the server; or, with
# --rule sgp, train it with N SGP nodes wired to each other (no server) and evaluate their average.
# Killing gem-run (Ctrl-C) stops everything it started.
set -u

usage_line="usage: gem-run -n N [--steps S] [--hosts FILE] [--resume] [options] RUNDIR
   or: gem-run -n N --rule sgp [--hosts FILE] [--work-opt OPT] [options] RUNDIR"
usage() {
	cat <<USAGE
$usage_line
Make a run with gem-init in RUNDIR, start gem-serve on a free port, start N
gem-work workers (locally, or over ssh on the hosts of --hosts), wait for them,
evaluate the result with gem-eval, stop the server and print gem-eval's TSV.
With --rule sgp there is no server: N gem-work nodes of Stochastic Gradient Push
train on disjoint shards, wired to each other on free ports, and gem-eval
--nodes evaluates each node and their average.

  -n, --workers N     number of workers; default 4, or with --hosts the slots
                      listed
  -t, --steps S       every worker trains S steps (minibatches), not the run's
                      epochs: the run's budget, stored in it (gem-serve
                      --steps), which --resume finishes; given with --resume,
                      it replaces the stored one
      --hosts FILE    start the workers over ssh: one "host [slots]" per line;
                      the server listens on every address (--public) behind a
                      fresh token, and the workers reach it by this host's name
                      (\$GEM_HOST overrides it)
  -l, --listen H:P    where gem-serve listens; default 127.0.0.1:0 (with
                      --hosts: 0.0.0.0:0)
      --tls           serve HTTPS: a certificate made for this run (openssl) in
                      RUNDIR, copied to the hosts of --hosts; the workers trust
                      it alone (gem-work --cacert); the default with --hosts.
                      With --rule sgp every node listens on HTTPS with it (its
                      key copied too) and trusts it alone in its peers
      --no-tls        plain HTTP with --hosts, SGP nodes too (the token then
                      crosses the network in clear)
      --resume        continue the run in RUNDIR instead of making a new one
      --work-opt OPT  pass OPT to every gem-work (repeatable), e.g.
                      --work-opt=--slowdown=2; with --rule sgp e.g.
                      --work-opt=--overlap, --work-opt=--topology=ring
      --serve-opt OPT pass OPT to gem-serve (repeatable), e.g.
                      --serve-opt=--max-updates=100
      --shards K      serve θ with K gem-serve processes, one shard each
                      (--shard I/K, on this host); the workers commit to all of
                      them. Default 1
      --shard-hosts FILE
                      start shard I over ssh on the I-th host of FILE (one
                      per line, taken in turn), listening on every address
                      behind the run's token; a host that does not share
                      RUNDIR gets a copy of the run and gives its shard
                      directory back at the end. Needs --shards 2 or more
      --codec C       every gem-work's --codec (raw, zlib, zlib+shuffle, fp16,
                      int8, int4, topk:F); default raw
      --ssh CMD       the ssh command for --hosts and --shard-hosts, its words
                      split as a shell would (e.g. "ssh -J gateway -p 2222");
                      default \$GEM_SSH, else ssh
  -r, --rule sgp      train with SGP nodes instead of a server (other rules go
                      to gem-init)
  -q, --quiet         no progress
  -h, --help          show this help
  -V, --version       show the version
Every other option goes to gem-init (see gem-init --help); --workers N is passed
on too.
USAGE
}

die_usage() { echo "gem-run: $*" >&2; echo "$usage_line" >&2; exit 2; }

# plural N WORD: "1 worker", "2 workers".
plural() { if [ "$1" = 1 ]; then echo "1 $2"; else echo "$1 ${2}s"; fi; }

# relay PROG STATUS [WHO]: PROG's complaint (on stdin) as gem-run's own: its lines with the
# prefix "gem-run: WHO" and without PROG's usage lines (the options were given to gem-run,
# whose usage line follows when PROG says the usage was bad, STATUS 2).
relay() {
	sed -e "/^usage: $1 /d" -e "/^   or: $1 /d" -e "s/^$1: /gem-run: ${3:-}/" >&2
	[ "$2" != 2 ] || echo "$usage_line" >&2
}

# check_work ARG...: gem-work --check with ARG... and the --work-opt options; exits as gem-run
# (2, the complaint as gem-run's) when a worker or node would refuse them.
check_work() {
	local rc=0 err
	err=$(gem-work --check -q "$@" "${workopts[@]}" 2>&1 >/dev/null) || rc=$?
	[ $rc = 0 ] || { relay gem-work $rc "gem-work: " <<<"$err"; exit $rc; }
}

# init_run: make RUNDIR with gem-init (exits as gem-init did when it fails).
init_run() {
	local rc=0 err
	err=$(gem-init -q --workers "$workers" "${initopts[@]}" "$rundir" 2>&1 >/dev/null) || rc=$?
	[ -z "$err" ] || relay gem-init $rc <<<"$err"
	[ $rc = 0 ] || exit $rc
}

# tick: a second's pause that starts no process (a read's timeout on a pipe nothing writes to),
# for the loops that look after gem-run's children: a sleep a second in each would be a hundred
# processes a second with a hundred workers. A trapped signal runs its trap at once.
exec {tick_fd}<> <(:)
tick() { read -r -t 1 -u "$tick_fd" _; }

# spawn CMD...: start CMD in the background ($! is its job) inside a subshell of its own that
# waits for it, so that a CMD killed by a signal is gem-run's to report (its status is
# 128+N) and bash prints no "line N: PID Killed" of its own. TERM, INT and HUP sent to the
# job go on to CMD, and so does gem-run's death: killed outright (SIGKILL), it runs no trap,
# so the subshell looks every second whether gem-run ($$) is still there.
spawn() {
	(
		trap 'kill -TERM "$c" 2>/dev/null' TERM INT HUP
		# bash's own notice of a CMD killed by a signal is not for the user: CMD alone keeps
		# the standard error
		exec 3>&2 2>/dev/null
		"$@" 2>&3 3>&- &
		c=$!
		while kill -0 "$c" 2>/dev/null; do
			kill -0 $$ 2>/dev/null || kill -TERM "$c" 2>/dev/null
			tick
		done
		wait "$c" 2>/dev/null
	) &
}

# ssh gives up on a host that does not answer, and notices one that hangs, instead of waiting
# forever (GEM_SSH_TIMEOUT: seconds to connect; default 10)
ssh_opts=(-o BatchMode=yes -o "ConnectTimeout=${GEM_SSH_TIMEOUT:-10}" -o ServerAliveInterval=15
	  -o ServerAliveCountMax=4)

# rsh HOST ARG...: ARG... run on HOST by the ssh command (--ssh, $GEM_SSH, or ssh: its words
# split as a shell would, "ssh -J gw -p 2222"), with ssh_opts. Every connection gem-run makes,
# and every copy, goes through it.
rsh() {
	local h=$1
	shift
	"${ssh_cmd[@]}" "${ssh_opts[@]}" "$h" "$@"
}

# On another host a worker or node runs under this watchdog, which stops it (SIGTERM) when its
# standard input closes: when its ssh ends (gem-run stops it, or the connection is lost), the
# remote process goes too.
# With --token, the first line of the standard input is the token, handed on to the command's
# standard input (never a command line or a file). "gem-run: remote start" on stderr first tells
# a connection sshd dropped before the command ran (MaxStartups) from a command that failed.
remote_watchdog='t=
if [ "$1" = --token ]; then shift; IFS= read -r t || exit 1; fi
echo "gem-run: remote start on $(uname -n)" >&2
exec 3<&0
if [ -n "$t" ]; then printf "%s\n" "$t" | "$@" 3<&- & else "$@" </dev/null 3<&- & fi
p=$!
{ cat <&3 >/dev/null 2>&1; kill -TERM $p 2>/dev/null; } &
w=$!
exec 3<&-
wait $p
s=$?
kill $w 2>/dev/null
exit $s'

# remote_cmd ARG...: the command line ssh sends, ARG... under the watchdog.
remote_cmd() {
	printf "exec sh -c '%s' gem-remote" "$remote_watchdog"
	printf ' %q' "$@"
}

# ssh_slot HOST OUT LOG [--token FILE] CMD...: run CMD on HOST under the watchdog, stdout
# appended to OUT, stderr to LOG; returns ssh's status (the command's, or 255). Meant to run in
# the background. A connection sshd dropped before the command started (too many at once) is
# tried again, up to 6 times with backoff. SIGTERM closes the command's standard input, which
# stops it on its host, and waits (10 s at most) for ssh to end.
ssh_slot() {
	local h=$1 out=$2 log=$3 tok= try size rc sp w ms k
	shift 3
	[ "$1" != --token ] || { tok=$2; shift 2; }
	trap '[ -z "$w" ] || exec {w}>&-; for ((k = 0; k < 100; k++)); do kill -0 $sp 2>/dev/null || break; sleep 0.1; done
	      kill $sp 2>/dev/null; wait $sp; exit 143' TERM
	trap '' HUP INT
	for ((try = 0; ; try++)); do
		size=$(stat -c %s "$log" 2>/dev/null || echo 0)
		exec {w}> >(exec "${ssh_cmd[@]}" "${ssh_opts[@]}" "$h" "$(remote_cmd ${tok:+--token} "$@")" \
			>>"$out" 2>>"$log")
		sp=$!
		[ -z "$tok" ] || cat "$tok" >&$w
		# gem-run killed outright (SIGKILL) runs no trap: closing the command's standard input
		# stops it on its host (the watchdog) when gem-run ($$) is gone
		while kill -0 $sp 2>/dev/null; do
			if [ -n "$w" ] && ! kill -0 $$ 2>/dev/null; then exec {w}>&-; w=; fi
			tick
		done
		wait $sp
		rc=$?
		[ -z "$w" ] || exec {w}>&-
		# ssh's own words for a connection closed before the protocol began
		[ $rc = 255 ] && [ $try -lt 6 ] &&
			! tail -c +$((size + 1)) "$log" | grep -q '^gem-run: remote start' &&
			tail -c +$((size + 1)) "$log" | grep -Eq 'kex_exchange_identification|Connection (reset|closed) by' ||
			return $rc
		ms=$(((200 << try) + RANDOM % 300))
		sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	done
}

# stagger I: after the I-th connection (from 0), a pause every 8: a few connections at a time,
# under sshd's MaxStartups (10 unauthenticated connections before it starts dropping some).
stagger() {
	[ $((($1 + 1) % 8)) != 0 ] || sleep 0.3
}

# slot_failed WHAT I STATUS LOG: say that worker or node I (on its host, if any) failed, how, and
# the end of its log.
slot_failed() {
	local on= how="exit status $3"
	[ ${#slots[@]} -eq 0 ] || on=" on ${slots[$(($2 % ${#slots[@]}))]}"
	[ "$3" -le 128 ] || [ "$3" = 255 ] || how="killed by signal $(($3 - 128))"
	[ "$3" != 255 ] || [ ${#slots[@]} -eq 0 ] || how="ssh failed, exit status 255"
	echo "gem-run: $1 $2$on failed ($how):" >&2
	grep -v '^gem-run: remote start' "$4" | tail -3 >&2
}

# probe_hosts PROG NAME HOST...: before anything starts there, check every HOST: ssh reaches
# it, PROG (gem-work, gem-serve) is in the PATH of its ssh shell and, NAME given, the host
# resolves NAME (the name the workers reach this host by). Says what is wrong, by host, and
# fails.
probe_hosts() {
	local h rc bad=0 dir n pids=() hs=() prog=$1 name=$2
	shift 2
	dir=$(mktemp -d "${TMPDIR:-/tmp}/gem-run.XXXXXX") || return 1
	hs=($(printf '%s\n' "$@" | sort -u))
	for n in "${!hs[@]}"; do
		rsh "${hs[$n]}" "command -v $prog >/dev/null || exit 4
			[ -z '$name' ] || ! command -v getent >/dev/null || getent hosts '$name' >/dev/null || exit 3" \
			</dev/null >/dev/null 2>"$dir/$n.err" &
		pids+=($!)
		stagger "$n"
	done
	for n in "${!hs[@]}"; do
		h=${hs[$n]}
		wait "${pids[$n]}"
		rc=$?
		case $rc in
		0) continue ;;
		3) echo "gem-run: $h cannot resolve $name, the name the workers reach this host by;" \
			"set GEM_HOST to a name or address that $h resolves" >&2 ;;
		4) echo "gem-run: $h: no $prog in the PATH of its ssh shell" >&2 ;;
		*) echo "gem-run: cannot run a command on $h over ssh (exit status $rc):" >&2
		   tail -3 "$dir/$n.err" >&2 ;;
		esac
		bad=1
	done
	rm -rf "$dir"
	return $bad
}
# check_data_hosts HOST...: a dataset given by the paths of its files (csv:, npy:, npz:,
# cifar: in run.json's data.dir) must be readable at those paths on every HOST, where the
# workers read it: gem-run copies no data (a run is small, a dataset need not be). Names each
# host and path that lacks it, says how to put it there, and fails.
check_data_hosts() {
	local loc h p bad=0 paths=()
	loc=$(sed -n 's/^ *"dir": *"\(\(csv\|npy\|npz\|cifar\):[^"]*\)",*$/\1/p' "$rundir/run.json")
	[ -n "$loc" ] || return 0
	IFS=, read -r -a paths <<<"${loc#*:}"
	[ "${loc%%:*}" != npz ] || paths=("${paths[0]}") # the names of its arrays follow its path
	for h in $(printf '%s\n' "$@" | sort -u); do
		for p in "${paths[@]}"; do
			rsh "$h" test -r "$(printf %q "$p")" </dev/null && continue
			echo "gem-run: $h cannot read $p (the run's --data ${loc%%:*}:); gem-run copies no" \
				"data: put it at the same path on $h (scp -r $p $h:$p) or on a file system" \
				"$h shares, then gem-run --resume" >&2
			bad=1
		done
	done
	return $bad
}

# hosts_apart HOST...: the distinct HOSTs that do not see RUNDIR at its absolute path $rrun (a
# marker file made there is not found), one per line: they get copies of the run's files.
hosts_apart() {
	local h marker=".gem-run-marker-$$"
	: >"$rundir/$marker" || return 1
	for h in $(printf '%s\n' "$@" | sort -u); do
		rsh "$h" test -e "$(printf %q "$rrun/$marker")" </dev/null || echo "$h"
	done
	rm -f "$rundir/$marker"
}

# copy_to HOST FILE...: FILEs of RUNDIR (directories too) into $rrun on HOST, as a tar stream
# over rsh (scp could not take the ssh command's words).
copy_to() {
	local h=$1 f names=()
	shift
	for f in "$@"; do names+=("${f#"$rundir"/}"); done
	tar -C "$rundir" -cf - "${names[@]}" |
		rsh "$h" "mkdir -p $(printf %q "$rrun") && tar -C $(printf %q "$rrun") -xf -"
}

# copy_from HOST NAME...: the files or directories NAME of $rrun on HOST into RUNDIR.
copy_from() {
	local h=$1
	shift
	rsh "$h" "tar -C $(printf %q "$rrun") -cf - $(printf '%q ' "$@")" </dev/null |
		tar -C "$rundir" -xf -
}

# init_option OPT: "value" if gem-init takes OPT (-m, --model) with a value, "flag" if without,
# nothing if it has no such option. Its --help says so: a value's name follows the option after
# one space, the description after two or more.
init_option() {
	[ -n "${init_help:-}" ] || init_help=$(gem-init --help)
	printf '%s\n' "$init_help" | awk -v o="$1" '/^ +-/ {
		line = $0
		sub(/^ +/, "", line)
		short = ""
		if (line ~ /^-[^-], /) { short = substr(line, 1, 2); line = substr(line, 5) }
		if (line !~ /^--/) { long = ""; rest = substr(line, 3) } else {
			long = line; sub(/ .*/, "", long); rest = substr(line, length(long) + 1) }
		if (o == short || o == long) { print (rest ~ /^ [^ ]/ ? "value" : "flag"); exit }
	}'
}
bindir=$(cd "$(dirname "$0")" && pwd)
PATH="$bindir:$PATH"
# GEM_LOG is checked as every program checks it (gem-init says what is wrong with it)
if [ -n "${GEM_LOG:-}" ] && ! msg=$(gem-init --version 2>&1 >/dev/null); then
	echo "gem-run: ${msg#gem-init: }" >&2
	exit 2
fi
shards=1 shard_hosts= workers=4 workers_set=0 steps= steps_set=0 hosts= listen= resume=0 tls= quiet=0 initopts=() workopts=() serveopts=() rundir= sgp=0 ssh_str=${GEM_SSH:-ssh}
while [ $# -gt 0 ]; do
	case "$1" in
	-n|--workers) [ $# -ge 2 ] || die_usage "$1 needs a value"; workers=$2; workers_set=1; shift ;;
	--workers=*) workers=${1#*=}; workers_set=1 ;;
	-t|--steps) [ $# -ge 2 ] || die_usage "$1 needs a value"; steps=$2; steps_set=1; shift ;;
	--steps=*) steps=${1#*=}; steps_set=1 ;;
	--hosts) [ $# -ge 2 ] || die_usage "$1 needs a value"; hosts=$2; shift ;;
	--hosts=*) hosts=${1#*=} ;;
	-l|--listen) [ $# -ge 2 ] || die_usage "$1 needs a value"; listen=$2; shift ;;
	--listen=*) listen=${1#*=} ;;
	--resume) resume=1 ;;
	--tls) tls=1 ;;
	--no-tls) tls=0 ;;
	--work-opt) [ $# -ge 2 ] || die_usage "$1 needs a value"; workopts+=("$2"); shift ;;
	--work-opt=*) workopts+=("${1#*=}") ;;
	--serve-opt) [ $# -ge 2 ] || die_usage "$1 needs a value"; serveopts+=("$2"); shift ;;
	--serve-opt=*) serveopts+=("${1#*=}") ;;
	--shards) [ $# -ge 2 ] || die_usage "$1 needs a value"; shards=$2; shift ;;
	--shards=*) shards=${1#*=} ;;
	--shard-hosts) [ $# -ge 2 ] || die_usage "$1 needs a value"; shard_hosts=$2; shift ;;
	--shard-hosts=*) shard_hosts=${1#*=} ;;
	--ssh) [ $# -ge 2 ] || die_usage "$1 needs a value"; ssh_str=$2; shift ;;
	--ssh=*) ssh_str=${1#*=} ;;
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
		case "$(init_option "${1%%=*}")" in
		flag) initopts+=("$1") ;;
		value) case "$1" in
			--*=*) initopts+=("$1") ;;
			*) [ $# -ge 2 ] || die_usage "$1 needs a value"; initopts+=("$1" "$2"); shift ;;
			esac ;;
		*) die_usage "unrecognized option '${1%%=*}'" ;;
		esac ;;
	*) [ -z "$rundir" ] || die_usage "more than one RUNDIR"; rundir=$1 ;;
	esac
	shift
done
[ $# -eq 0 ] || { [ -z "$rundir" ] && [ $# -eq 1 ] && rundir=$1; } || die_usage "unexpected arguments: $*"
[ -n "$rundir" ] || die_usage "no RUNDIR given"
# run/ and run are the same run: paths joined below get one slash
while [ "$rundir" != / ] && [ "${rundir%/}" != "$rundir" ]; do rundir=${rundir%/}; done
case "$workers" in ''|*[!0-9]*|0) die_usage "-n: not a positive integer: $workers" ;; esac
read -ra ssh_cmd <<<"$ssh_str"
[ ${#ssh_cmd[@]} -gt 0 ] || die_usage "--ssh (or GEM_SSH): no command given"
if [ $steps_set = 1 ]; then
	case "$steps" in ''|*[!0-9]*|0*) die_usage "--steps: not a positive integer: $steps" ;; esac
	# a served run's budget is the run's (its server stores it); an SGP node's is its own
	if [ $sgp = 1 ]; then workopts+=(--steps "$steps"); else serveopts+=(--steps "$steps"); fi
fi

# The progress display, as every gem program chooses it (GEM_PROGRESS, gem(7)): a line refreshed
# in place on a terminal, a plain line every N seconds, or nothing.
progress_mode=off progress_every=0.5
case "${GEM_PROGRESS:-}" in
'') [ ! -t 2 ] || progress_mode=tty ;;
tty) progress_mode=tty ;;
off) ;;
lines) progress_mode=lines progress_every=30 ;;
lines:*) progress_mode=lines progress_every=${GEM_PROGRESS#lines:}
	case "$progress_every" in ''|.|*[!0-9.]*|*.*.*) die_usage "GEM_PROGRESS=$GEM_PROGRESS: after lines: a number of seconds" ;; esac ;;
*) die_usage "GEM_PROGRESS=$GEM_PROGRESS: want tty, lines, lines:SECONDS or off" ;;
esac
[ $quiet = 0 ] || progress_mode=off
# matched as text: a number too long for test(1) would make it complain before the message
case "$shards" in [1-9]|[1-5][0-9]|6[0-4]) ;; *) die_usage "--shards: not an integer in [1, 64]: $shards" ;; esac
# The hosts of the shards, one per line, taken in turn: shard I on shosts[I % count].
shosts=()
if [ -n "$shard_hosts" ]; then
	[ -r "$shard_hosts" ] || die_usage "--shard-hosts: cannot read $shard_hosts"
	while read -r h _; do
		case "$h" in ''|'#'*) continue ;; esac
		shosts+=("$h")
	done <"$shard_hosts"
	[ ${#shosts[@]} -gt 0 ] || die_usage "--shard-hosts: no hosts in $shard_hosts"
	[ $sgp = 0 ] || die_usage "--shard-hosts: not with --rule sgp (there is no server)"
	[ "$shards" -ge 2 ] || die_usage "--shard-hosts: needs --shards 2 or more (one server runs here)"
fi


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

# make_cert NAME...: RUNDIR/tls-cert.pem and its key RUNDIR/tls-key.pem, a certificate made for
# this run, valid for every NAME (a host name or an IPv4 address), localhost and 127.0.0.1, and
# its own CA; exits after openssl's complaint when it cannot be made.
make_cert() {
	local h san=
	for h in "$@"; do
		case "$h" in *[!0-9.]*) h="DNS:$h" ;; *) h="IP:$h" ;; esac
		case ",$san," in *",$h,"*) ;; *) san="${san:+$san,}$h" ;; esac
	done
	(umask 077 && openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=${1:-localhost}" \
		-addext "subjectAltName=${san:+$san,}DNS:localhost,IP:127.0.0.1" \
		-keyout "$rundir/tls-key.pem" -out "$rundir/tls-cert.pem" 2>"$rundir/openssl.err") ||
		{ cat "$rundir/openssl.err" >&2; echo "gem-run: openssl could not make a certificate" >&2; exit 1; }
}

# SGP: N nodes and no server. The handshake: each node binds a free port (--listen HOST:0)
# and prints its URL on stdout, which goes to RUNDIR/node-I.url; once every node has printed
# one, gem-run writes the peer list (one URL per line, node order) to RUNDIR/peers by a rename,
# which the nodes wait for (--peers-file); they then check with each other that they run the
# same topology (hello) and start. With --hosts, each host gets a copy of the run (run.json,
# params.gem, the token, the certificate and its key) at the same path, the peer list, and
# gives back its node files. With TLS (the default with --hosts) every node listens on HTTPS
# with the run's certificate, made for every host, and trusts it alone in its peers.
sgp_run() {
	local i j h port u nodes=() failed=0 ok copy_hosts=() rc
	cleanup_sgp() {
		trap - INT TERM HUP EXIT
		for p in "${nodes[@]}"; do kill "$p" 2>/dev/null; done
		wait 2>/dev/null
		# the handshake's files, as gem-serve removes its server.url
		rm -f "$rundir"/node-*.url
	}
	trap 'echo "gem-run: interrupted; stopping" >&2; cleanup_sgp; exit 130' INT
	trap 'echo "gem-run: terminated; stopping" >&2; cleanup_sgp; exit 143' TERM
	trap 'echo "gem-run: hung up; stopping" >&2; cleanup_sgp; exit 129' HUP
	trap cleanup_sgp EXIT
	case "$listen" in *:0) ;; *) die_usage "--listen: with --rule sgp the port must be 0 (each node picks a free one)" ;; esac
	local public=() token=() tlsopts=() runfiles=() rrun
	case "$listen" in 127.*|localhost:*|\[::1\]:*) ;; *) public=(--public) ;; esac
	# reachable from the network: a token (a public listener needs one), made with the run
	[ -z "$hosts" ] && [ ${#public[@]} -eq 0 ] || token=(--token-file "$rundir/token")
	# over the network the token travels in HTTPS by default
	[ -n "$tls" ] || { [ -n "$hosts" ] && tls=1 || tls=0; }
	[ $tls = 0 ] || tlsopts=(--tls-cert "$rundir/tls-cert.pem" --tls-key "$rundir/tls-key.pem"
				 --cacert "$rundir/tls-cert.pem")
	# before anything is made: what the nodes would refuse, and every host
	check_work --rule sgp --run "$rundir" --listen "$listen" "${public[@]}" "${token[@]}" \
		"${tlsopts[@]}" --node 0 --peers-file "$rundir/peers"
	[ -z "$hosts" ] || probe_hosts gem-work "" "${slots[@]}" || exit 1
	init_run
	check_data_hosts "${slots[@]}" || exit 1
	rm -f "$rundir"/node-*.url "$rundir"/node-*.gem "$rundir"/node-*.jsonl "$rundir"/node-*.log "$rundir/peers"
	# on other hosts the run is at the same absolute path (a relative one would resolve
	# against the remote $HOME, possibly into another run)
	rrun=$(cd "$rundir" && pwd) || exit 1
	[ ${#token[@]} -eq 0 ] || (umask 077 && head -c 24 /dev/urandom | base64 >"$rundir/token") || exit 1
	runfiles=("$rundir/run.json" "$rundir/params.gem" ${token[@]:+"$rundir/token"})
	if [ $tls = 1 ]; then
		make_cert "${slots[@]}"
		runfiles+=("$rundir/tls-cert.pem" "$rundir/tls-key.pem")
		# at their absolute paths: a node on another host finds them where copy_to put them
		tlsopts=(--tls-cert "$rrun/tls-cert.pem" --tls-key "$rrun/tls-key.pem"
			 --cacert "$rrun/tls-cert.pem")
	fi
	if [ -n "$hosts" ]; then
		# a host that shares the run directory needs no copy
		copy_hosts=($(hosts_apart "${slots[@]}"))
		for h in "${copy_hosts[@]}"; do
			copy_to "$h" "${runfiles[@]}" ||
				{ echo "gem-run: cannot copy the run to $h" >&2; exit 1; }
		done
	fi
	[ $quiet = 1 ] || echo "gem-run: $rundir: starting $(plural "$workers" "SGP node")" >&2
	for ((i = 0; i < workers; i++)); do
		if [ ${#slots[@]} -gt 0 ]; then
			h=${slots[$((i % ${#slots[@]}))]}
			: >"$rundir/node-$i.url"
			: >"$rundir/node-$i.log"
			ssh_slot "$h" "$rundir/node-$i.url" "$rundir/node-$i.log" \
				gem-work -q --rule sgp --run "$rrun" --listen "$listen" \
				"${public[@]}" ${token[@]:+--token-file "$rrun/token"} "${tlsopts[@]}" \
				--node "$i" --peers-file "$rrun/peers" "${workopts[@]}" </dev/null &
			stagger "$i"
		else
			spawn gem-work -q --rule sgp --run "$rundir" --listen "$listen" "${public[@]}" "${token[@]}" \
				"${tlsopts[@]}" --node "$i" --peers-file "$rundir/peers" "${workopts[@]}" \
				</dev/null >"$rundir/node-$i.url" 2>"$rundir/node-$i.log"
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
		if [ $ok = 0 ]; then
			kill -0 "${nodes[$i]}" 2>/dev/null && kill "${nodes[$i]}"
			wait "${nodes[$i]}"
			slot_failed node "$i" $? "$rundir/node-$i.log"
			exit 1
		fi
		u=$(head -1 "$rundir/node-$i.url")
		if [ ${#slots[@]} -gt 0 ]; then
			# a node listening on every address is reached by its host's name
			port=${u##*:}
			u="${u%%://*}://${slots[$((i % ${#slots[@]}))]}:$port"
		fi
		echo "$u" >>"$rundir/peers.tmp"
	done
	mv "$rundir/peers.tmp" "$rundir/peers" || exit 1
	if [ -n "$hosts" ]; then
		for h in "${copy_hosts[@]}"; do
			rsh "$h" "cat >$(printf %q "$rrun/peers.tmp") &&
				mv $(printf %q "$rrun/peers.tmp") $(printf %q "$rrun/peers")" <"$rundir/peers" ||
				{ echo "gem-run: cannot send the peer list to $h" >&2; exit 1; }
		done
	fi
	for i in "${!nodes[@]}"; do
		wait "${nodes[$i]}" || { rc=$?; failed=$((failed + 1)); slot_failed node "$i" $rc "$rundir/node-$i.log"; }
	done
	nodes=()
	if [ -n "$hosts" ]; then
		for ((i = 0; i < workers; i++)); do
			h=${slots[$((i % ${#slots[@]}))]}
			case " ${copy_hosts[*]} " in *" $h "*) ;; *) continue ;; esac
			copy_from "$h" "node-$i.gem" "node-$i.jsonl" 2>/dev/null
		done
	fi
	[ $failed = 0 ] || { echo "gem-run: $failed of $(plural "$workers" node) failed" >&2; exit 1; }
	gem-eval --nodes "$rundir" || exit 1
	exit 0
}

# The run's certificate to every host of --hosts that does not share RUNDIR, at the same path.
copy_cert() {
	local h
	for h in $(hosts_apart "${slots[@]}"); do
		copy_to "$h" "$rundir/tls-cert.pem" ||
			{ echo "gem-run: cannot copy the certificate to $h" >&2; return 1; }
	done
}

# --shard-hosts: the run (run.json, params.gem, the token, the certificate and its key, and with
# --resume the shards' directories) to every shard host that does not share RUNDIR, at the same
# path; those hosts are copy_shard_hosts, and give their shards back (copy_shards_back).
copy_shard_hosts=()
copy_shards_out() {
	local h k files=() stale=()
	copy_shard_hosts=($(hosts_apart "${shosts[@]}"))
	for h in "${copy_shard_hosts[@]}"; do
		files=("$rundir/run.json" "$rundir/params.gem" "$rundir/token")
		[ ! -f "$rundir/tls-cert.pem" ] || files+=("$rundir/tls-cert.pem" "$rundir/tls-key.pem")
		stale=()
		for ((k = 0; k < shards; k++)); do
			[ "${shosts[$((k % ${#shosts[@]}))]}" = "$h" ] || continue
			# a new run's shard must not resume what an earlier run left on that host
			stale+=("$rrun/shard-$k-of-$shards")
			[ ! -d "$rundir/shard-$k-of-$shards" ] || files+=("$rundir/shard-$k-of-$shards")
		done
		[ $resume = 1 ] || rsh "$h" rm -rf "$(printf '%q ' "${stale[@]}")" </dev/null ||
			{ echo "gem-run: cannot clear $h:$rrun" >&2; return 1; }
		copy_to "$h" "${files[@]}" || { echo "gem-run: cannot copy the run to $h" >&2; return 1; }
	done
}

# Each shard's directory back from a host that does not share RUNDIR (after its server stopped).
copy_shards_back() {
	local h k
	for ((k = 0; k < shards; k++)); do
		h=${shosts[$((k % ${#shosts[@]}))]}
		case " ${copy_shard_hosts[*]} " in *" $h "*) ;; *) continue ;; esac
		copy_from "$h" "shard-$k-of-$shards" ||
			echo "gem-run: cannot copy shard $k back from $h" >&2
	done
}

if [ $sgp = 1 ]; then
	[ $resume = 0 ] || die_usage "--resume: not with --rule sgp (an SGP run starts from params.gem)"
	[ "$shards" = 1 ] || die_usage "--shards: not with --rule sgp (there is no server)"
	sgp_run
	exit $?
fi

pids=() servers=() errs=() served=0
# serve_failed [STATUS [ERR [PID]]]: a gem-serve has stopped on its own, with STATUS (none or
# empty: waited for, PID, default the first server's): what it said (in ERR, default the first
# server's), and gem-run's exit (2 when the usage was bad, as --serve-opt's).
serve_failed() {
	local rc=${1:-} err=${2:-${errs[0]}} pid=${3:-${servers[0]}}
	if [ -z "$rc" ]; then rc=0; wait "$pid" || rc=$?; fi
	relay gem-serve $rc "gem-serve: " <"$err"
	[ $rc != 2 ] || exit 2
	echo "gem-run: gem-serve failed (exit status $rc); no result" >&2
	exit 1
}
# The servers go first: they checkpoint and answer the workers still running, remote ones
# too, that the run is over (410), so they leave; then what is left here is stopped.
cleanup() {
	trap - INT TERM HUP EXIT
	for p in "${servers[@]}"; do
		kill "$p" 2>/dev/null
		for ((j = 0; j < 100; j++)); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
	done
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
}
# stopped HOW STATUS: a signal stops the run: everything stopped, and once a server has
# checkpointed, where it stands and how to go on.
stopped() {
	echo "gem-run: $1; stopping" >&2
	cleanup
	if [ $served = 1 ]; then
		[ ${#copy_shard_hosts[@]} -eq 0 ] || copy_shards_back
		checkpointed "$1"
	fi
	exit "$2"
}
trap 'stopped interrupted 130' INT
trap 'stopped terminated 143' TERM
trap 'stopped "hung up" 129' HUP
trap cleanup EXIT

# params_version FILE: the version of θ a params file holds.
params_version() {
	sed -n '1s/.*"version":\([0-9]*\).*/\1/p' "$1" 2>/dev/null
}

# checkpointed WHAT: say WHAT stopped the run, the version each server checkpointed, and the
# command that continues the run.
checkpointed() {
	local v= k
	if [ "$shards" = 1 ]; then
		echo "gem-run: $1; the server checkpointed at version $(params_version "$rundir/params.gem")" >&2
	else
		for ((k = 0; k < shards; k++)); do
			v="${v:+$v, }$(params_version "$rundir/shard-$k-of-$shards/params.gem")"
		done
		echo "gem-run: $1; the shards checkpointed at versions $v" >&2
	fi
	echo "gem-run: gem-run --resume -n $workers${steps:+ --steps $steps}${hosts:+ --hosts $hosts}$([ "$shards" = 1 ] || echo " --shards $shards")${shard_hosts:+ --shard-hosts $shard_hosts} $rundir continues the run" >&2
}

# run_state: what gem-serve --check says of the run in RUNDIR: "complete VERSION" (printed), or
# nothing (it can be resumed); 1 after its complaint, as gem-run's, when it cannot be (it
# diverged).
run_state() {
	local rc=0 out errf
	errf=$(mktemp "${TMPDIR:-/tmp}/gem-run.XXXXXX") || return 1
	out=$(gem-serve --check ${steps:+--steps "$steps"} "$rundir" 2>"$errf") || rc=$?
	# not a matter of usage: no usage line
	[ $rc = 0 ] || relay gem-serve 1 <"$errf"
	rm -f "$errf"
	[ $rc = 0 ] && printf '%s' "$out"
}

# the name workers on other hosts reach the server by
server_host=${GEM_HOST:-$(hostname -f 2>/dev/null || hostname)}
# over the network the token travels in HTTPS by default
[ -n "$tls" ] || { [ -n "$hosts$shard_hosts" ] && tls=1 || tls=0; }
public=()
case "$listen" in 127.*|localhost:*|\[::1\]:*) ;; *) public=(--public) ;; esac
# workers come over the network (a public listener needs a token): a fresh token, made with the
# run, which travels on ssh's standard input
token=()
[ -z "$hosts$shard_hosts" ] && [ ${#public[@]} -eq 0 ] || token=(--token-file "$rundir/token")
tlsopts=() cacert=()
[ $tls = 0 ] || tlsopts=(--tls-cert "$rundir/tls-cert.pem" --tls-key "$rundir/tls-key.pem")
[ $tls = 0 ] || cacert=(--cacert "$rundir/tls-cert.pem")

# Before anything is made: what a server or a worker would refuse, the run to resume, every host.
rc=0
err=$(gem-serve --check --listen "$listen" "${public[@]}" "${token[@]}" "${tlsopts[@]}" \
	$([ "$shards" = 1 ] || echo "--shard 0/$shards") "${serveopts[@]}" 2>&1 >/dev/null) || rc=$?
[ $rc = 0 ] || { relay gem-serve $rc "gem-serve: " <<<"$err"; exit $rc; }
check_work --server "$rundir" "${token[@]}" "${cacert[@]}"
if [ $resume = 1 ]; then
	[ ${#initopts[@]} -eq 0 ] || die_usage "--resume takes no gem-init options"
	if [ ! -f "$rundir/run.json" ]; then
		echo "gem-run: $rundir: not a run (nothing to resume)" >&2
		exit 2
	fi
	state=$(run_state) || exit 2
	case "$state" in
	complete\ *) echo "gem-run: $rundir is complete (version ${state#complete })" >&2; exit 0 ;;
	esac
fi
# every host can be reached, runs gem-work and resolves this host's name, before anything starts
[ -z "$hosts" ] || probe_hosts gem-work "$server_host" "${slots[@]}" || exit 1
[ ${#shosts[@]} -eq 0 ] || probe_hosts gem-serve "" "${shosts[@]}" || exit 1

[ $resume = 1 ] || init_run
[ -z "$hosts" ] || check_data_hosts "${slots[@]}" || exit 1
# on other hosts the run is at the same absolute path
rrun=$(cd "$rundir" && pwd) || exit 1
if [ $tls = 1 ]; then
	# for this host's name and the shards' hosts; workers trust it alone
	make_cert "$server_host" "${shosts[@]}"
	# at its absolute path: a worker on another host finds it where copy_cert put it
	cacert=(--cacert "$rrun/tls-cert.pem")
fi
[ "$tls" != 1 ] || [ -z "$hosts" ] || copy_cert || exit 1
[ ${#token[@]} -eq 0 ] || (umask 077 && head -c 24 /dev/urandom | base64 >"$rundir/token") || exit 1
[ ${#shosts[@]} -eq 0 ] || copy_shards_out || exit 1
# one server, or K of them, shard I's files (its server.url too) in RUNDIR/shard-I-of-K/; with
# --shard-hosts shard I runs on its host, and prints its URL into RUNDIR/serve-I.url
url=
for ((k = 0; k < shards; k++)); do
	if [ "$shards" = 1 ]; then
		sdir=$rundir shardopt=() err="$rundir/serve.err"
	else
		sdir="$rundir/shard-$k-of-$shards" shardopt=(--shard "$k/$shards") err="$rundir/serve-$k.err"
	fi
	if [ ${#shosts[@]} -gt 0 ]; then
		h=${shosts[$((k % ${#shosts[@]}))]}
		: >"$rundir/serve-$k.url"
		: >"$err"
		ssh_slot "$h" "$rundir/serve-$k.url" "$err" --token "$rundir/token" \
			gem-serve --listen "0.0.0.0:${listen##*:}" --public --token-file /dev/stdin \
			${tlsopts[@]:+--tls-cert "$rrun/tls-cert.pem" --tls-key "$rrun/tls-key.pem"} \
			"${shardopt[@]}" "${serveopts[@]}" "$rrun" </dev/null &
		servers+=($!) errs+=("$err") served=1
		for ((i = 0; i < 600; i++)); do
			[ "$(wc -l <"$rundir/serve-$k.url")" -ge 1 ] && break
			kill -0 "${servers[$k]}" 2>/dev/null || serve_failed "" "$err" "${servers[$k]}"
			sleep 0.1
		done
		[ "$(wc -l <"$rundir/serve-$k.url")" -ge 1 ] ||
			{ echo "gem-run: gem-serve did not start on $h" >&2; exit 1; }
		# a server listening on every address is reached by its host's name
		u=$(head -1 "$rundir/serve-$k.url")
		url=${url:+$url,}${u%%://*}://$h:${u##*:}
		continue
	fi
	rm -f "$sdir/server.url"
	spawn gem-serve --listen "$listen" "${public[@]}" "${token[@]}" "${tlsopts[@]}" "${shardopt[@]}" \
		"${serveopts[@]}" "$rundir" >/dev/null 2>"$err"
	servers+=($!) errs+=("$err") served=1
	for ((i = 0; i < 300; i++)); do
		[ -s "$sdir/server.url" ] && break
		kill -0 "${servers[$k]}" 2>/dev/null || serve_failed "" "$err" "${servers[$k]}"
		sleep 0.1
	done
	[ -s "$sdir/server.url" ] || { echo "gem-run: gem-serve did not start" >&2; exit 1; }
	u=$(cat "$sdir/server.url")
	if [ -n "$hosts" ]; then
		# workers on other hosts reach the server by this host's name
		u="${u%%://*}://$server_host:${u##*:}"
	fi
	url=${url:+$url,}$u
done

[ $quiet = 1 ] || echo "gem-run: $rundir served at $url; starting $(plural "$workers" worker)" >&2
for ((i = 0; i < workers; i++)); do
	if [ ${#slots[@]} -gt 0 ]; then
		h=${slots[$((i % ${#slots[@]}))]}
		ssh_slot "$h" "$rundir/worker-$i.log" "$rundir/worker-$i.log" --token "$rundir/token" \
			gem-work -q --server "$url" --worker-id "$i" --token-file /dev/stdin "${cacert[@]}" \
			"${workopts[@]}" </dev/null &
		stagger "$i"
	else
		spawn gem-work -q --server "$url" --worker-id "$i" "${token[@]}" "${cacert[@]}" "${workopts[@]}" >>"$rundir/worker-$i.log" 2>&1
	fi
	pids+=($!)
done

# Progress while the workers run: the server's own (GET /v1/stats "progress": version, samples
# out of the run's total, updates/s, ETA, smoothed loss, computed by role/progress as every gem
# program does) and its workers.
if [ $progress_mode != off ] && command -v curl >/dev/null; then
	(
		while sleep "$progress_every"; do
			s=$(curl -s --max-time 2 ${cacert[@]:+--cacert "$rundir/tls-cert.pem"} "${url%%,*}/v1/stats") || break
			line=$(printf '%s' "$s" | sed -n 's/.*"line":"\([^"]*\)".*/\1/p')
			[ -n "$line" ] || break
			n=$(printf '%s' "$s" | sed -n 's/.*"active":\([0-9][0-9]*\).*/\1/p')
			line="$line  ${n:-0} worker$([ "${n:-0}" = 1 ] || echo s)"
			if [ $progress_mode = tty ]; then
				printf '\rgem-run: %s\033[K' "$line" >&2
			else
				printf 'gem-run: %s\n' "$line" >&2
			fi
		done
	) &
	progress=$!
fi

failed=0
for i in "${!pids[@]}"; do
	wait "${pids[$i]}" || { rc=$?; failed=$((failed + 1)); slot_failed worker "$i" $rc "$rundir/worker-$i.log"; }
done
pids=()
# every worker has left: the servers stop by themselves and write their final checkpoints
# (else, as with --keep-running, or when a worker failed and they would wait for it, they are
# stopped at once, and checkpoint)
for k in "${!servers[@]}"; do
	p=${servers[$k]} stopped=0
	for ((i = 0; i < 100 && failed == 0; i++)); do kill -0 "$p" 2>/dev/null || { stopped=1; break; }; sleep 0.1; done
	[ $stopped = 1 ] || kill "$p" 2>/dev/null
	rc=0
	wait "$p" 2>/dev/null || rc=$?
	[ $stopped = 0 ] || [ $rc = 0 ] || { serve_error=$rc serve_error_file=${errs[$k]}; }
done
servers=()
[ ${#copy_shard_hosts[@]} -eq 0 ] || copy_shards_back
if [ -n "${progress:-}" ]; then
	kill "$progress" 2>/dev/null
	wait "$progress" 2>/dev/null
	[ $progress_mode != tty ] || echo >&2
fi
# the server's summary of the run (shard 0's, for a sharded run)
[ $quiet = 1 ] || sed -n 's/^gem-serve: \(done\|failed\|interrupted\): /gem-run: server: /p' "${errs[0]}" | tail -1 >&2
if [ $failed != 0 ]; then
	# no TSV: it would read as the run's result; a run that diverged is said so, not resumed
	run_state >/dev/null && checkpointed "$failed of $(plural "$workers" worker) failed"
	exit 1
fi
# a server that stopped on its own with an error (idle timeout, a failed checkpoint): no TSV
[ -z "${serve_error:-}" ] || serve_failed "$serve_error" "$serve_error_file"
gem-eval "$rundir" || exit 1
exit 0
