#!/bin/sh
# gem-vs-proxy.sh: the GEM paper's claim that GEM generalises better than its proxy. GEM with N
# real workers (gem-run -n N, one epoch each) against sequential momentum SGD, the proxy GEM
# matches (gem-work --local), over the same number of samples (N epochs), on Fashion-MNIST's cnn
# (lr 0.05, momentum 0.9, batch 64). For each N of NS (default "4 8") and seed of SEEDS
# (default "1 2 3"): final test loss and accuracy (gem-eval) and final training loss (mean
# minibatch loss of the last 100 updates).
#
# usage: sh gem-vs-proxy.sh [OUTDIR]       (default build/gem-vs-proxy)
#
# Writes OUTDIR/runs.tsv and OUTDIR/summary.tsv (mean and sd over the seeds). Restartable.
# Environment: GEM_BIN where the gem programs are (default: PATH, then the source tree's bin/).
set -u
out=${1:-build/gem-vs-proxy}
. "$(dirname "$0")/common.sh"
mkdir -p "$out/runs" "$out/rows" || exit 1
recipe="--model cnn --data fashion-mnist --lr 0.05 --momentum 0.9 --batch 64 --epochs 1"
for n in ${NS:-4 8}; do
for seed in ${SEEDS:-1 2 3}; do
for kind in gem proxy; do
	name=$kind-n$n-s$seed run=$out/runs/$kind-n$n-s$seed row=$out/rows/$kind-n$n-s$seed.tsv
	[ -s "$row" ] && continue
	rm -rf "$run"
	echo "gem-vs-proxy: $name ($(date +%T))" >&2
	st=ok
	if [ $kind = gem ]; then
		# shellcheck disable=SC2086
		gem-run -q -n "$n" $recipe --seed "$seed" "$run" >/dev/null 2>"$run.err" || st=failed
	else
		# shellcheck disable=SC2086
		{ gem-init -q $recipe --seed "$seed" "$run" &&
			gem-work -q --epochs "$n" --local "$run"; } 2>"$run.err" || st=failed
	fi
	gem-eval "$run" >"$run.eval" 2>>"$run.err" || st=failed
	awk -v kind="$kind" -v n="$n" -v seed="$seed" -v st="$st" -v loss="$(tail_loss "$run")" '
		/^#/ { next } { printf "%s\t%d\t%d\t%s\t%d\t%s\t%s\t%s\n", kind, n, seed, st, $3, loss, $4, $5 }' \
		"$run.eval" >"$row.tmp" && mv "$row.tmp" "$row"
	cat "$row" >&2
done; done; done

printf 'kind\tN\tseed\tstatus\tsamples\ttrain_loss\ttest_loss\ttest_acc\n' >"$out/runs.tsv"
cat "$out"/rows/*.tsv | sort -k2,2n -k1,1 -k3,3n >>"$out/runs.tsv"
awk -F'\t' 'NR > 1 && $4 == "ok" { k = $1 "\t" $2; c[k]++; l[k] += $7; l2[k] += $7 * $7
		a[k] += $8; a2[k] += $8 * $8 }
	function sd(s, s2, n) { return n > 1 && s2 - s * s / n > 0 ? sqrt((s2 - s * s / n) / (n - 1)) : 0 }
	END { for (k in c) printf "%s\t%d\t%.4f\t%.4f\t%.4f\t%.4f\n", k, c[k], l[k] / c[k],
		sd(l[k], l2[k], c[k]), a[k] / c[k], sd(a[k], a2[k], c[k]) }' "$out/runs.tsv" |
	sort -k2,2n -k1,1 >"$out/s.tmp"
{ printf 'kind\tN\truns\ttest_loss_mean\ttest_loss_sd\ttest_acc_mean\ttest_acc_sd\n'
  cat "$out/s.tmp"; } >"$out/summary.tsv"
rm -f "$out/s.tmp"
cat "$out/summary.tsv"
