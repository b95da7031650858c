#!/bin/sh
# validate-sim.sh: does gem-sim predict what real workers do? The same runs three ways: real
# processes (`gem-run -n N`), gem-sim with the measured timing preset (`--timing measured`), and
# gem-sim with workers arriving in strict turn (`--timing roundrobin`).
#
# usage: sh validate-sim.sh [OUTDIR]       (default build/validate-sim)
#
# The paper's recipe on Fashion-MNIST's cnn (lr 0.05, momentum 0.9, batch 64), for each rule of
# RULES (default "gem downpour"), N of NS (default "5 10 20") and seed of SEEDS (default "1 2 3"),
# each worker STEPS steps (default 300; one epoch is 938). Per run: the final training loss (mean
# minibatch loss of the last 100 central updates, from the log) and the test loss and accuracy
# (gem-eval). Writes OUTDIR/runs.tsv (one row per run) and OUTDIR/summary.tsv (mean and sd over
# the seeds per rule, N and mode). Restartable: a run whose row exists is skipped.
# Environment: GEM_BIN where the gem programs are (default: PATH, then the source tree's bin/).
set -eu
out=${1:-build/validate-sim}
. "$(dirname "$0")/common.sh"
steps=${STEPS:-300}
mkdir -p "$out/runs" "$out/rows"
recipe="--model cnn --data fashion-mnist --lr 0.05 --momentum 0.9 --batch 64 --epochs 1"

for rule in ${RULES:-gem downpour}; do
for n in ${NS:-5 10 20}; do
for seed in ${SEEDS:-1 2 3}; do
for mode in real measured roundrobin; do
	name=$rule-n$n-s$seed-$mode
	row=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$row" ] && continue
	rm -rf "$run"
	echo "validate-sim: $name ($(date +%T))" >&2
	t0=$(date +%s.%N)
	if [ $mode = real ]; then
		# shellcheck disable=SC2086
		gem-run -q -n "$n" --rule "$rule" $recipe --seed "$seed" --work-opt "--steps=$steps" \
			"$run" >"$run.eval" 2>"$run.err" || status=failed
	else
		# shellcheck disable=SC2086
		gem-sim -q -n "$n" --timing $mode --steps "$steps" --rule "$rule" $recipe --seed "$seed" \
			"$run" >"$run.sim" 2>"$run.err" || status=failed
		gem-eval "$run" >"$run.eval" 2>>"$run.err" || status=failed
	fi
	t1=$(date +%s.%N)
	st=${status:-ok}; unset status
	awk -v rule="$rule" -v n="$n" -v seed="$seed" -v mode="$mode" -v st="$st" \
		-v loss="$(tail_loss "$run")" -v secs="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" '
		/^#/ { next } { tl = $4; ta = $5; upd = $2 }
		END { printf "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%.1f\n", rule, n, seed, mode, st, loss,
			tl, ta, upd, secs }' "$run.eval" >"$row.tmp" && mv "$row.tmp" "$row"
done; done; done; done

printf 'rule\tN\tseed\tmode\tstatus\ttrain_loss\ttest_loss\ttest_acc\tupdates\tseconds\n' >"$out/runs.tsv"
cat "$out"/rows/*.tsv | sort -k1,1 -k2,2n -k4,4 -k3,3n >>"$out/runs.tsv"
awk -F'\t' 'NR > 1 { k = $1 "\t" $2 "\t" $4; n[k]++; a[k] += $6; a2[k] += $6 * $6
		b[k] += $8; b2[k] += $8 * $8 }
	function sd(s, s2, c) { return c > 1 && s2 - s * s / c > 0 ? sqrt((s2 - s * s / c) / (c - 1)) : 0 }
	END { for (k in n) printf "%s\t%d\t%.4f\t%.4f\t%.4f\t%.4f\n", k, n[k], a[k] / n[k],
			sd(a[k], a2[k], n[k]), b[k] / n[k], sd(b[k], b2[k], n[k]) }' "$out/runs.tsv" |
	sort -k1,1 -k2,2n -k3,3 >"$out/summary.tmp"
{ printf 'rule\tN\tmode\truns\ttrain_loss_mean\ttrain_loss_sd\ttest_acc_mean\ttest_acc_sd\n'
  cat "$out/summary.tmp"; } >"$out/summary.tsv"
rm -f "$out/summary.tmp"
cat "$out/summary.tsv"
