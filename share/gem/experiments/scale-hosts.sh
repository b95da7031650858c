#!/bin/bash
# scale-hosts.sh: gem past one host, for real. Eight hosts made of network namespaces with
# tbf-limited links (nshosts.sh): gem-run on h0, θ's two slices on h0 and h1 (--slices 2
# --slice-hosts), N workers (default 200) spread evenly over h2..h7, plain HTTP (--no-tls);
# rules gem and sync, each link at each rate. The hosts are namespaces of one machine: they
# share its cores, so the wall times say what N processes cost here, not what 8 machines do.
#
# usage: bash scale-hosts.sh [OUTDIR]      (as root; default build/scale-hosts)
#
# Writes OUTDIR/results.tsv, one row per run:
#   rule rate workers steps seconds failed commits tau_mean tau_p50 tau_p99 tau_max
#   rss0_mb rss1_mb join_first join_last test_acc status
# seconds: gem-run's wall time; failed: workers gem-run reported failed; commits, tau_*: the
# updates in slice 0's log and their staleness (every slice applies every commit; sync logs
# one update per round);
# rssI_mb: the peak resident memory of slice I's gem-serve (VmHWM, read every half second);
# join_first, join_last: seconds from slice 0's start to its first worker's join and to the
# last worker's first join;
# test_acc: gem-eval's at the end. The runs stay in OUTDIR/runs/NAME/, gem-run's output in
# OUTDIR/runs/NAME.tsv and .err. Restartable: a run whose row exists is skipped.
#
# Environment:
#   RULES   default "gem sync"
#   RATES   link rates in Mbit/s, default "1000 100"
#   N       workers, default 200;  STEPS  local steps per worker, default 30
#   MODEL   default mlp; DATA default fashion-mnist; LR 0.05; BATCH 64; SEED 1
#   GEM_BIN where the gem programs are (default: PATH)
set -u

out=${1:-build/scale-hosts}
[ "$(id -u)" = 0 ] || { echo "scale-hosts: run it as root (network namespaces, tc)" >&2; exit 2; }
[ -z "${GEM_BIN:-}" ] || PATH="$GEM_BIN:$PATH"
command -v gem-run >/dev/null || { echo "scale-hosts: no gem-run in PATH (set GEM_BIN)" >&2; exit 2; }
nw=${N:-200}
steps=${STEPS:-30}
mkdir -p "$out/rows" "$out/runs" || exit 1
out=$(cd "$out" && pwd)
shim=$(mktemp -d "${TMPDIR:-/tmp}/scale-hosts.XXXXXX") || exit 1

. "$(dirname "$0")/nshosts.sh"
NS_P=gems$$ NS_N=7 NS_NET=10.79.0
ns_shim "$shim" || exit 1
trap 'ns_teardown; rm -rf "$shim"' EXIT
trap 'exit 130' INT TERM

# the workers' hosts, N slots spread over h2..h7; the slices' hosts
for i in 2 3 4 5 6 7; do
	echo "h$i $(((nw + 7 - i) / 6))"
done >"$shim/hosts"
printf 'h0\nh1\n' >"$shim/slice-hosts"

# peak_rss HOST...: every half second, the largest VmHWM (kB) of gem-serve on each HOST, one
# "host kB" line per host each time it grows
peak_rss() {
	local h p v
	declare -A top
	while sleep 0.5; do
		for h in "$@"; do
			for p in $(ip netns pids "$NS_P-$h" 2>/dev/null); do
				[ "$(cat /proc/"$p"/comm 2>/dev/null)" = gem-serve ] || continue
				v=$(awk '/^VmHWM/ { print $2 }' /proc/"$p"/status 2>/dev/null)
				if [ -n "$v" ] && [ "$v" -gt "${top[$h]:-0}" ]; then
					top[$h]=$v
					echo "$h $v"
				fi
			done
		done
	done
}

# taus LOG: commits, staleness mean, p50, p99, max of the applied commits in LOG
taus() {
	sed -n '/"event"/d; s/.*"tau":\([0-9]*\).*/\1/p' "$1" | sort -n |
		awk '{ t[++n] = $1; s += $1 }
		END { if (!n) { printf "0\t-\t-\t-\t-"; exit }
		      printf "%d\t%.2f\t%d\t%d\t%d", n, s / n, t[int(0.5 * (n - 1)) + 1],
		             t[int(0.99 * (n - 1)) + 1], t[n] }'
}

# joins LOG: seconds from the server's start to the first join, and to the last first join of
# a worker (a worker's later joins, after it was declared gone, not counted)
joins() {
	awk 'function at() { match($0, /"time":[0-9.]+/); return substr($0, RSTART + 7, RLENGTH - 7) }
	/"event":"start"/ && t0 == "" { t0 = at() }
	/"event":"join"/ { match($0, /"worker":[0-9]+/); w = substr($0, RSTART + 9, RLENGTH - 9)
		if (!(w in seen)) { seen[w]; last = at(); if (first == "") first = last } }
	END { if (first == "" || t0 == "") { printf "-\t-"; exit }
	      printf "%.1f\t%.1f", first - t0, last - t0 }' "$1"
}

# one RULE RATE: one run, its row.
one() {
	local rule=$1 rate=$2 name run t0 rc rpid tt failed acc status r0 r1
	name=$rule-${rate}mbit-n$nw
	run=$out/runs/$name
	[ -s "$out/rows/$name.tsv" ] && return 0
	ns_hosts "$rate" || { echo "scale-hosts: $name: cannot make the hosts" >&2; return 1; }
	rm -rf "$run"
	echo "scale-hosts: $name: start $(date +%T)" >&2
	peak_rss h0 h1 >"$run.rss" &
	rpid=$!
	t0=$(date +%s.%N)
	ip netns exec "$NS_P-h0" env PATH="$shim:$PATH" GEM_HOST=h0 gem-run -q -n "$nw" \
		--hosts "$shim/hosts" --slices 2 --slice-hosts "$shim/slice-hosts" --no-tls \
		--rule "$rule" --steps "$steps" --listen 0.0.0.0:0 --model "${MODEL:-mlp}" \
		--data "${DATA:-fashion-mnist}" --lr "${LR:-0.05}" --batch "${BATCH:-64}" \
		--seed "${SEED:-1}" "$run" >"$run.tsv" 2>"$run.err"
	rc=$?
	tt=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
	kill $rpid 2>/dev/null
	wait $rpid 2>/dev/null
	failed=$(grep -c '^gem-run: worker [0-9]*.* failed (' "$run.err")
	acc=$(awk -F'\t' '!/^#/ && NF >= 5 { a = $5 } END { print a }' "$run.tsv")
	r0=$(awk '$1 == "h0" { v = $2 } END { printf "%.1f", v / 1024 }' "$run.rss")
	r1=$(awk '$1 == "h1" { v = $2 } END { printf "%.1f", v / 1024 }' "$run.rss")
	status=ok
	[ "$rc" = 0 ] || { status=failed; tail -3 "$run.err" >&2; }
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rule" "$rate" "$nw" "$steps" \
		"$tt" "$failed" "$(taus "$run/slice-0-of-2/log.jsonl")" "$r0" "$r1" \
		"$(joins "$run/slice-0-of-2/log.jsonl")" "${acc:--}" "$status" >"$out/rows/$name.tsv"
	cat "$out/rows/$name.tsv" >&2
}

for rate in ${RATES:-1000 100}; do
	for rule in ${RULES:-gem sync}; do
		one "$rule" "$rate"
	done
done
{
	printf '# rule\trate\tworkers\tsteps\tseconds\tfailed\tcommits\ttau_mean\ttau_p50\ttau_p99\ttau_max\trss0_mb\trss1_mb\tjoin_first\tjoin_last\ttest_acc\tstatus\n'
	cat "$out"/rows/*.tsv 2>/dev/null
} >"$out/results.tsv"
cat "$out/results.tsv"
