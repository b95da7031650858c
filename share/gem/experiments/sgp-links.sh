#!/bin/bash
# sgp-links.sh: SGP's communication-bound claim, measured on hosts made of network
# namespaces whose links are limited with tc's tbf: time to a test accuracy, and the final
# accuracy, of sync, dma, gem (a parameter server and 4 workers), SGP and Overlap-SGP (4 nodes),
# at each link rate, with every link at the rate and with one node's link at a tenth of it.
#
# usage: sh sgp-links.sh [OUTDIR]         (as root; default build/sgp-links)
#
# Each configuration gets hosts h0 (gem-run, and the server of sync, dma and gem) and h1..h4
# (the workers or SGP nodes): one network namespace each, on a bridge in a namespace of its own
# (addresses 10.78.0.0/24 inside them only), each host's link limited both ways (tbf on its veth
# and on the bridge's end); with a slow link, h4's at a tenth. gem-run --hosts starts the
# workers through an "ssh" that runs the command in the host's namespace (the hosts share the
# filesystem, so nothing is copied), plain HTTP (--no-tls). While a run trains, its test
# accuracy is sampled: gem-eval --follow on the server, or gem-eval --nodes on the SGP nodes
# (the average), every INTERVAL seconds, each sample stamped with the seconds since gem-run
# started, and the final evaluation closes the curve. The evaluations take CPU from the
# training: on a small machine, keep INTERVAL large.
#
# Writes OUTDIR/results.tsv, one row per run:
#   rule rate slow seed target seconds_to_target final_acc seconds status
# (seconds_to_target "-" when the target was not reached), the accuracy curves in
# OUTDIR/curves/NAME.tsv (seconds, test accuracy) and the runs in OUTDIR/runs/NAME/.
# Restartable: a run whose row exists (OUTDIR/rows/NAME.tsv) is skipped.
#
# Environment:
#   RULES     default "sync dma gem sgp overlap-sgp"
#   RATES     link rates in Mbit/s, default "1000 100"
#   SLOW      default "0 1": every link at the rate; h4's link at a tenth
#   SEEDS     default "1"
#   TARGET    the test accuracy to reach, default 0.80
#   MODEL     default cnn; DATA default fashion-mnist; LR 0.05; BATCH 64; EPOCHS 1
#   STEPS     a quick check: S steps per worker or node (gem-work --steps)
#   INTERVAL  seconds between accuracy samples, default 5
#   GEM_BIN   where the gem programs are (default: PATH)
set -u

out=${1:-build/sgp-links}
[ "$(id -u)" = 0 ] || { echo "sgp-links: run it as root (network namespaces, tc)" >&2; exit 2; }
[ -z "${GEM_BIN:-}" ] || PATH="$GEM_BIN:$PATH"
command -v gem-run >/dev/null || { echo "sgp-links: no gem-run in PATH (set GEM_BIN)" >&2; exit 2; }
n=4
P=gemx$$
mkdir -p "$out/rows" "$out/curves" "$out/runs" || exit 1
out=$(cd "$out" && pwd)
shim=$(mktemp -d "${TMPDIR:-/tmp}/sgp-links.XXXXXX") || exit 1

. "$(dirname "$0")/nshosts.sh"
NS_P=$P NS_N=$n NS_NET=10.78.0
ns_shim "$shim" || exit 1
trap 'ns_teardown; rm -rf "$shim"' EXIT
trap 'exit 130' INT TERM

# hosts RATE SLOW: the hosts h0..h4 and their links; with SLOW 1, h4's at a tenth.
hosts() {
	if [ "$2" = 0 ]; then ns_hosts "$1"; else ns_hosts "$1" "$n"; fi
}

# sample_sgp RUN START: the nodes' average test accuracy every INTERVAL s while RUN trains.
sample_sgp() {
	local run=$1 t0=$2 urls
	until [ -s "$run/peers" ]; do sleep 0.5; done
	urls=$(tr '\n' , <"$run/peers")
	while sleep "${INTERVAL:-5}"; do
		ip netns exec "$P-h0" gem-eval --retry-for 1 --nodes "${urls%,}" 2>/dev/null |
			awk -F'\t' -v t=$(($(date +%s) - t0)) '$1 == "average" { print t "\t" $5 }' || break
	done
}

# sample_server RUN START: the server's test accuracy at each new version it reports.
sample_server() {
	local run=$1 t0=$2
	until [ -s "$run/server.url" ]; do sleep 0.5; done
	ip netns exec "$P-h0" gem-eval --follow "$run" --interval "${INTERVAL:-5}" 2>/dev/null |
		while IFS=$'\t' read -r _ _ _ _ acc; do
			case $acc in ''|*[!0-9.]*) continue ;; esac
			printf '%s\t%s\n' $(($(date +%s) - t0)) "$acc"
		done
}

# one RULE RATE SLOW SEED: one run, its row.
one() {
	local rule=$1 rate=$2 slow=$3 seed=$4 name run t0 rc pid spid opts=() acc tt status
	name=$rule-${rate}mbit-slow$slow-s$seed
	run=$out/runs/$name
	[ -s "$out/rows/$name.tsv" ] && return 0
	hosts "$rate" "$slow" || { echo "sgp-links: $name: cannot make the hosts" >&2; return 1; }
	rm -rf "$run"
	for i in $(seq 1 $n); do echo "h$i"; done >"$out/hosts"
	case $rule in
	sgp) opts=(--rule sgp) ;;
	overlap-sgp) opts=(--rule sgp --work-opt=--overlap) ;;
	*) opts=(--rule "$rule" --no-tls) ;;
	esac
	[ -z "${STEPS:-}" ] || opts+=("--work-opt=--steps=$STEPS")
	echo "sgp-links: $name: start $(date +%T)" >&2
	t0=$(date +%s)
	ip netns exec "$P-h0" env PATH="$shim:$PATH" GEM_HOST=h0 gem-run -q --hosts "$out/hosts" \
		"${opts[@]}" --listen 0.0.0.0:0 --model "${MODEL:-cnn}" --data "${DATA:-fashion-mnist}" \
		--lr "${LR:-0.05}" --batch "${BATCH:-64}" --epochs "${EPOCHS:-1}" --seed "$seed" \
		"$run" >"$run.tsv" 2>"$run.err" &
	pid=$!
	case $rule in
	*sgp) sample_sgp "$run" "$t0" >"$out/curves/$name.tsv" & ;;
	*) sample_server "$run" "$t0" >"$out/curves/$name.tsv" & ;;
	esac
	spid=$!
	wait $pid
	rc=$?
	tt=$(($(date +%s) - t0))
	kill $spid 2>/dev/null
	wait $spid 2>/dev/null
	status=ok
	[ $rc = 0 ] || { status=failed; tail -3 "$run.err" >&2; }
	case $rule in
	*sgp) acc=$(awk -F'\t' '$1 == "average" { print $5 }' "$run.tsv") ;;
	*) acc=$(awk -F'\t' '!/^#/ { print $5 }' "$run.tsv") ;;
	esac
	# the end of the run is the curve's last sample
	[ -z "$acc" ] || printf '%s\t%s\n' "$tt" "$acc" >>"$out/curves/$name.tsv"
	printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$rule" "$rate" "$slow" "$seed" "${TARGET:-0.80}" \
		"$(awk -v g="${TARGET:-0.80}" '$2 >= g { print $1; exit }' "$out/curves/$name.tsv" |
			grep . || echo -)" "${acc:--}" "$tt" "$status" >"$out/rows/$name.tsv"
	cat "$out/rows/$name.tsv" >&2
}

for rate in ${RATES:-1000 100}; do
	for slow in ${SLOW:-0 1}; do
		for seed in ${SEEDS:-1}; do
			for rule in ${RULES:-sync dma gem sgp overlap-sgp}; do
				one "$rule" "$rate" "$slow" "$seed"
			done
		done
	done
done
{
	printf '# rule\trate\tslow\tseed\ttarget\tseconds_to_target\tfinal_acc\tseconds\tstatus\n'
	cat "$out"/rows/*.tsv 2>/dev/null
} >"$out/results.tsv"
cat "$out/results.tsv"
