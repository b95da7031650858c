#!/bin/bash
# lowcomm.sh: low-communication rules against sync on the same runs: cnn on Fashion-MNIST, a
# gem-serve and N real gem-work processes (gem-run), one epoch per worker, lr 0.05, momentum
# 0.9, batch 64. Per run: the test loss and accuracy of the final θ (gem-eval), the bytes on
# the wire (every commit and reply, headers included: the sum of log.jsonl's bytes_in and
# bytes_out, gem-protocol(7)), the central updates, and the training seconds.
#
# usage: bash lowcomm.sh [OUTDIR]          (default build/experiment-lowcomm)
#
# Writes OUTDIR/runs.tsv and OUTDIR/table.md. Restartable: a run whose row exists in
# OUTDIR/rows/ is skipped. Environment: N (workers, default 4), SEEDS (default 1), CELLS (the
# runs, separated by spaces: "rule:H", or "rule:H:OPTS" with OPTS gem-init options separated
# by commas, where pN is --fragments=N and aX --mix=X (diloco:50:p5,a0.5); default: sync,
# diloco at H = 10 and 50, async-diloco at H = 10 with the outer lr of diloco and with 0.7/N,
# each without and with delayed Nesterov over N arrivals, gem with a window of H = 10 and
# 50; "sgp:1" is Stochastic Gradient Push: gem-run's N nodes on disjoint parts, no server, each
# node N epochs of its part, so that the samples in all are those of N workers of one epoch;
# its OPTS go to gem-run, e.g. --work-opt=--overlap; its row is gem-eval's average of the
# nodes' parameters, its bytes every node's pushes, each counted once, headers included, and
# its seconds the slowest node's at its last iteration), STEPS (local steps per worker, or
# iterations per SGP node, in place of one epoch), SIM=1
# (gem-sim -n N in place of gem-run: N virtual workers in turn on one core, deterministic,
# its bytes those of the same messages served; the seconds are gem-sim's, its summary line in
# OUTDIR/runs/NAME.sim), SIM_OPTS (more gem-sim options, its timing: "--stragglers 1:4"),
# PROBES (SIM=1: virtual times T at which θ is evaluated too, each by the same simulation with
# every worker dying at T, whose θ is the run's at T; rows in OUTDIR/probes.tsv; with a rule
# whose rounds wait for every worker, sync or diloco, T must fall while no commit waits for
# its round, else the workers' leaving ends that round early with the commits in), GEM_BIN
# where the gem programs are (default: PATH, then the source tree's bin/). Training seconds
# are the machine's at the time: on a shared machine they are noisy.
#
# PARTS (default "runs": the above) with tbf, as root: the cells of TBF_CELLS (default sync,
# diloco at H = 50 and async-diloco at H = 50 with both remedies, outer lr 0.7/N and delayed
# Nesterov over N arrivals), seed SEEDS' first, each on hosts made of network namespaces whose
# links tc's tbf limits to each of TBF_RATES Mbit/s (default "100 10"; linkruns.sh,
# nshosts.sh): a gem-serve and 4 gem-work (gem-run over the hosts), one epoch each. Per run:
# the training seconds (the server's) at which the training loss (the mean minibatch loss of
# the updates within the last 25,600 samples: 100 rounds of sync) first reaches 0.6, 0.55,
# 0.5 and 0.45 (LR_TARGETS), and of the end, the test loss and accuracy, the bytes. A run at
# a rate of TBF_STOP (default "10") stops once it has reached every target, and any run once
# its training seconds pass TBF_LIMIT (default 900): its test figures are the θ's it stopped
# with. Rows in OUTDIR/tbf/, OUTDIR/tbf.tsv and OUTDIR/tbf.md.
set -u

out=${1:-build/experiment-lowcomm}
. "$(dirname "$0")/common.sh"
for p in gem-init gem-run gem-sim gem-eval; do
	command -v $p >/dev/null 2>&1 || { echo "lowcomm: $p not found (set GEM_BIN)" >&2; exit 1; }
done
N=${N:-4} SEEDS=${SEEDS:-1} SIM=${SIM:-0} STEPS=${STEPS:-} SIM_OPTS=${SIM_OPTS:-} PROBES=${PROBES:-}
lr_n=$(awk -v n="$N" 'BEGIN { printf "%g", 0.7 / n }')
# every async-diloco cell names its outer lr and delayed Nesterov: with -n N gem-init's defaults
# are the last cell's (0.7/N, N), and these cells compare them with DiLoCo's 0.7 and without
CELLS=${CELLS:-sync:1 diloco:10 diloco:50 async-diloco:10:--outer-lr=0.7,--delayed-nesterov=0 \
	async-diloco:10:--outer-lr=0.7,--delayed-nesterov=$N \
	async-diloco:10:--outer-lr=$lr_n,--delayed-nesterov=0 \
	async-diloco:10:--outer-lr=$lr_n,--delayed-nesterov=$N gem:10 gem:50}
TBF_CELLS=${TBF_CELLS:-sync:1 diloco:50 async-diloco:50:--outer-lr=$lr_n,--delayed-nesterov=$N}
PARTS=${PARTS:-runs} TBF_RATES=${TBF_RATES:-100 10} TBF_STOP=${TBF_STOP:-10} TBF_LIMIT=${TBF_LIMIT:-900}
mkdir -p "$out/runs" "$out/rows" "$out/probes" || exit 1
started=$(date +%s)

# bytes RUN: the bytes on the wire of RUN's log (update lines and the stop event); of an SGP
# run, its nodes' logs' pushes out (a push is in its receiver's bytes_in too)
bytes() {
	if [ -e "$1/node-0.jsonl" ]; then
		cat "$1"/node-*.jsonl | sed -n 's/.*"bytes_out":\([0-9]*\).*/0 \1/p'
	else
		sed -n 's/.*"bytes_in":\([0-9]*\),"bytes_out":\([0-9]*\).*/\1 \2/p' "$1/log.jsonl"
	fi | awk '{ s += $1 + $2 } END { printf "%.0f", s }'
}

# train RUN SEED RULE [gem-init options]: one run, gem-eval's table of its θ on stdout; with
# SIM=1, gem-sim's options (SIM_OPTS and any in $sim_extra) too
train() {
	local run=$1 seed=$2 rule=$3 epochs=1
	shift 3
	# an SGP node's epoch is one of its part: 1/N of a worker's
	[ "$rule" = sgp ] && epochs=$N
	set -- --rule "$rule" "$@" --lr 0.05 --momentum 0.9 --batch 64 --epochs "$epochs" --seed "$seed" \
		${STEPS:+--steps "$STEPS"}
	if [ "$SIM" = 1 ]; then
		# shellcheck disable=SC2086
		gem-sim -q -n "$N" $SIM_OPTS ${sim_extra:-} "$@" "$run" >"$run.sim" && gem-eval "$run"
	else
		gem-run -q -n "$N" "$@" "$run"
	fi
}

# probe NAME SEED RULE [gem-init options]: for each T of PROBES, θ at virtual time T (every
# worker dies then) evaluated: NAME's rows of probes.tsv, in probes/NAME
probe() {
	local name=$1 seed=$2 t run
	shift 2
	[ -s "$out/probes/$name" ] && return 0
	echo "lowcomm: $name at $PROBES" >&2
	for t in $PROBES; do
		run=$out/runs/$name-t$t
		rm -rf "$run"
		sim_extra=$(for ((w = 0; w < N; w++)); do printf -- '--die %d@%s ' "$w" "$t"; done) \
			train "$run" "$seed" "$@" >"$run.tsv" 2>"$run.err" || echo failed >"$run.tsv"
		awk -v n="$name" -v t="$t" 'END { printf "%s\t%s\t%s\n", n, t, $0 }' "$run.tsv"
	done >"$out/probes/$name.tmp" && mv "$out/probes/$name.tmp" "$out/probes/$name"
}

# sgp_seconds RUN: the training seconds of an SGP run: its slowest node's at its last
# iteration, from the node's start
sgp_seconds() {
	local log
	for log in "$1"/node-*.jsonl; do
		sed -n '/"event"/d; s/.*"elapsed":\([0-9.]*\),.*/\1/p' "$log" | tail -1
	done | awk '$1 > m { m = $1 } END { printf "%.3f", m }'
}

# row NAME SEED RULE H EXTRA [gem-init options]: one run; its row in rows/NAME
row() {
	local name=$1 seed=$2 rule=$3 h=$4 extra=$5 run=$out/runs/$1 status pick='NR == 2' secs=
	shift 5
	echo "lowcomm: $name" >&2
	rm -rf "$run"
	if ! train "$run" "$seed" "$rule" "$@" >"$run.tsv" 2>"$run.err"; then
		status=failed
		grep -q diverged "$run.err" && status=diverged
		printf '%s\t%s\t%s\t%s\t%s\t-\t-\t%s\t-\t-\n' "$rule" "$h" "${extra:--}" "$seed" \
			"$status" "$(bytes "$run")" >"$out/rows/$name"
		return 0
	fi
	# gem-eval's line of θ; of an SGP run (gem-eval --nodes), that of the average of the nodes'
	# parameters, its seconds from the nodes' logs
	# shellcheck disable=SC2016
	[ "$rule" = sgp ] && pick='$1 == "average"' secs=$(sgp_seconds "$run")
	awk -v r="$rule" -v h="$h" -v x="${extra:--}" -v s="$seed" -v b="$(bytes "$run")" -v t="$secs" "$pick"' {
		printf "%s\t%s\t%s\t%s\tok\t%s\t%s\t%s\t%s\t%s\n", r, h, x, s, $4, $5, b, $2, t == "" ? $1 : t }' \
		"$run.tsv" >"$out/rows/$name"
}

# parse SPEC SEED: the cell's rule, h, extra (its gem-init options), window (--window H but
# for sync) and name
parse() {
	IFS=: read -r rule h extra <<<"$1"
	extra=${extra//,/ }
	extra=$(sed -E 's/(^| )p([0-9]+)/\1--fragments=\2/g; s/(^| )a([0-9.]+)/\1--mix=\2/g' <<<"$extra")
	name=$rule-h$h${extra:+-${extra//--/}}-s$2
	name=${name//[= ]/}
	window=
	[ "$rule" = sync ] || [ "$rule" = sgp ] || window="--window $h"
}

# cell SPEC SEED: one run and its probes, each unless done already
cell() {
	local rule h extra name window seed=$2
	parse "$1" "$2"
	if [ "$SIM" = 1 ] && [ "$rule" = sgp ]; then
		echo "lowcomm: $name: skipped: gem-sim does not simulate sgp (run it without SIM=1)" >&2
		return 0
	fi
	# shellcheck disable=SC2086
	[ -s "$out/rows/$name" ] || row "$name" "$seed" "$rule" "$h" "$extra" $window $extra
	# shellcheck disable=SC2086
	[ "$SIM" = 1 ] && [ -n "$PROBES" ] && probe "$name" "$seed" "$rule" $window $extra
	return 0
}

# tbf SPEC SEED RATE: the cell's run on hosts whose links are at RATE Mbit/s (linkruns.sh),
# stopped at the targets at the rates of TBF_STOP; its row in tbf/NAME
tbf() {
	local rule h extra name window seed=$2 rate=$3 stop=0
	parse "$1" "$2"
	name=$name-${rate}mbit
	[ -s "$out/tbf/$name" ] && return 0
	case " $TBF_STOP " in *" $rate "*) stop=1 ;; esac
	echo "lowcomm: $name: start $(date +%T)" >&2
	# shellcheck disable=SC2086
	lr_run "$out/runs/$name" "$rate" $stop --rule "$rule" $window $extra --model cnn \
		--data fashion-mnist --lr 0.05 --momentum 0.9 --batch 64 --epochs 1 --seed "$seed" | {
		printf '%s\t%s\t%s\t%s\t%s\t' "$rule" "$h" "${extra:--}" "$seed" "$rate"
		cat
	} >"$out/tbf/$name.tmp" && mv "$out/tbf/$name.tmp" "$out/tbf/$name"
	echo "lowcomm: $name: $(cut -f6- "$out/tbf/$name" | tr '\t' ' ') ($(date +%T); $(uptime | sed 's/.*load/load/'))" >&2
}

# tbf_table: OUTDIR/tbf.tsv, the rows of tbf/, and OUTDIR/tbf.md, a table of them
tbf_table() {
	{
		printf 'rule\tH\toptions\tseed\trate\tended\ttest_loss\ttest_acc\tbytes\tend_seconds'
		printf '\tto_%s' $LR_TARGETS
		printf '\tlast_loss\twall_seconds\n'
		cat "$out/tbf/"* 2>/dev/null
	} >"$out/tbf.tsv"
	{
		printf '| rule | H | options | link Mbit/s | ended | test loss | test accuracy | MB on the wire | training s |'
		printf ' training loss %s (s) |' $LR_TARGETS
		printf '\n|---|---|---|---|---|---|---|---|---|%s\n' "$(printf -- '---|%.0s' $LR_TARGETS)"
		tail -n +2 "$out/tbf.tsv" | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %.4f | %.4f | %.1f |", $1, $2,
			$3 == "-" ? "" : $3, $5, $6, $7, $8, $9 / 1e6
			for (i = 10; i < NF - 1; i++) printf " %s |", $i; printf "\n" }'
	} >"$out/tbf.md"
	cat "$out/tbf.md"
}

case " $PARTS " in *" runs "*)
	for seed in $SEEDS; do
		for spec in $CELLS; do
			cell "$spec" "$seed"
		done
	done ;;
esac
case " $PARTS " in *" tbf "*)
	. "$(dirname "$0")/linkruns.sh"
	LR_TARGETS=${LR_TARGETS:-0.6 0.55 0.5 0.45} LR_WINDOW=25600 LR_LIMIT=$TBF_LIMIT
	lr_init lowcomm
	mkdir -p "$out/tbf" || exit 1
	for rate in $TBF_RATES; do
		for spec in $TBF_CELLS; do
			tbf "$spec" "${SEEDS%% *}" "$rate"
		done
	done
	tbf_table ;;
esac
# the tables below are the runs'
case " $PARTS " in *" runs "*) ;; *) exit 0 ;; esac

head='rule	H	options	seed	status	test_loss	test_acc	bytes	updates	train_seconds'
{ echo "$head"; cat "$out/rows/"*; } >"$out/runs.tsv"
if [ -n "$PROBES" ]; then
	echo "run	vtime	seconds	version	samples	test_loss	test_acc	bytes" |
		cat - "$out/probes/"* >"$out/probes.tsv"
fi
# table.md: per cell, over its seeds: how many ended ok, and the mean (± sd over the seeds that
# ended ok) of the test loss, the test accuracy and the training seconds; MB on the wire
# (10^6 bytes, the mean over every seed, those that failed included)
{
	echo "| rule | H | options | runs | ok | test loss | test accuracy | MB on the wire | updates | training s |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	tail -n +2 "$out/runs.tsv" | awk -F'\t' '
		function ms(s, q, n) { return n > 1 ? sprintf("%.4f ± %.4f", s / n, sqrt((q - s * s / n) / (n - 1))) : n ? sprintf("%.4f", s) : "-" }
		{ k = $1 "|" $2 "|" $3; if (!(k in runs)) order[++nk] = k; runs[k]++; mb[k] += $8 / 1e6
		  if ($5 != "ok") next
		  ok[k]++; l[k] += $6; l2[k] += $6 * $6; a[k] += $7; a2[k] += $7 * $7; t[k] += $10; u[k] = $9 }
		END { for (i = 1; i <= nk; i++) { k = order[i]; split(k, f, "|")
			printf "| %s | %s | %s | %d | %d | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], runs[k], ok[k],
				ms(l[k], l2[k], ok[k]), ms(a[k], a2[k], ok[k]), sprintf("%.1f", mb[k] / runs[k]), ok[k] ? u[k] : "-",
				ok[k] ? sprintf("%.0f", t[k] / ok[k]) : "-" } }'
} >"$out/table.md"
cat "$out/table.md"
echo "lowcomm: $(($(date +%s) - started)) s of wall time; $(uptime)" >&2
