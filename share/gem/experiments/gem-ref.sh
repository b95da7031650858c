#!/bin/sh
# gem-ref.sh: gem's two references for |θ − s_w| compared with gem-sim:
# gem_ref commit (gem's default: s_w is θ after the worker's last commit) against gem_ref pull
# (the authors' code: θ before it was applied, ε inside |Δθ + ε|; doc/rules.md "GEM"). cnn on
# Fashion-MNIST, momentum 0.9, batch 64, one epoch per worker, constant step times
# (round-robin arrivals), N = 5, 10, 20 workers, lr 0.05 and 0.1.
#
# usage: sh gem-ref.sh [OUTDIR]          (default build/experiment-gem-ref)
#
# Writes OUTDIR/table.tsv (one row per run: gem_ref, N, lr, seed, status, final training loss =
# mean minibatch loss of the last 100 central updates, test loss and accuracy, zero = mean over
# updates of the fraction of π clamped to 0, scale = mean over updates of |π⊙Δθ|₁/|Δθ|₁, median
# π, seconds) and OUTDIR/table.md (mean ± sd over the seeds of each gem_ref, N, lr).
#
# Restartable: a row whose result (OUTDIR/rows/NAME.tsv) exists is skipped; rerun to finish.
# Environment: JOBS rows at once (default 2), SEEDS (default "1 2 3"), NS (default "20 10 5"),
# LRS (default "0.05 0.1"), GEM_BIN where the gem programs are (default: PATH, then the source
# tree's bin/), STEPS (a quick check: S steps per worker instead of one epoch).
set -u

if [ "${1:-}" = --row ]; then
	# one row: --row OUTDIR REF N LR SEED
	out=$2 ref=$3 n=$4 lr=$5 seed=$6
	name=$ref-n$n-lr$lr-s$seed
	res=$out/rows/$name.tsv
	run=$out/runs/$name
	[ -s "$res" ] && exit 0
	rm -rf "$run" "$run.sim" "$run.err" "$run.eval"
	echo "gem-ref: $name: start $(date +%T)" >&2
	gem-sim -q -n "$n" --model cnn --data fashion-mnist --rule gem --gem-ref "$ref" \
		--lr "$lr" --momentum 0.9 --batch 64 --epochs 1 --seed "$seed" ${STEPS:+--steps "$STEPS"} \
		"$run" >"$run.sim" 2>"$run.err"
	rc=$?
	status=
	case $rc in
	0) status=ok ;;
	1) grep -q diverged "$run.err" && status=diverged ;;
	esac
	if [ -z "$status" ]; then
		echo "gem-ref: $name: gem-sim failed (exit $rc):" >&2
		tail -5 "$run.err" >&2
		exit 1
	fi
	gem-eval "$run" >"$run.eval" || { echo "gem-ref: $name: gem-eval failed" >&2; exit 1; }
	# sim: workers version samples vtime loss tau_mean tau_max pi_median scale failed seconds zero
	# eval: elapsed version samples test_loss test_acc
	awk -v ref="$ref" -v n="$n" -v lr="$lr" -v seed="$seed" -v status="$status" '
		FNR == 1 { f++ } /^#/ { next }
		f == 1 { loss = $5; pim = $8; scale = $9; secs = $11; zero = $12 }
		f == 2 { tl = $4; ta = $5 }
		END { printf "%s\t%d\t%s\t%s\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4g\t%.0f\n",
			ref, n, lr, seed, status, loss, tl, ta, zero, scale, pim, secs }' \
		"$run.sim" "$run.eval" >"$res.tmp" && mv "$res.tmp" "$res"
	echo "gem-ref: $name: $status, $(cut -f6-10 "$res" | tr '\t' ' ') ($(date +%T))" >&2
	exit 0
fi

out=${1:-build/experiment-gem-ref}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-sim >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-sim" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
STEPS=${STEPS:-}
export PATH STEPS
for p in gem-sim gem-init gem-eval; do
	command -v $p >/dev/null 2>&1 || { echo "gem-ref: $p not found (set GEM_BIN)" >&2; exit 1; }
done
JOBS=${JOBS:-2} SEEDS=${SEEDS:-1 2 3} NS=${NS:-20 10 5} LRS=${LRS:-0.05 0.1}
mkdir -p "$out/runs" "$out/rows" || exit 1
started=$(date +%s)

# The rows, seed by seed (a partial result covers every cell), the longest first in each seed.
for s in $SEEDS; do
	for n in $NS; do
		for lr in $LRS; do
			for ref in commit pull; do echo "$ref $n $lr $s"; done
		done
	done
done >"$out/rows.list"

xargs -P "$JOBS" -L 1 sh "$0" --row "$out" <"$out/rows.list"
failed=$?

head='gem_ref	N	lr	seed	status	final_loss	test_loss	test_acc	zero	scale	pi_median	seconds'
{
	echo "# $head"
	cat "$out"/rows/*.tsv 2>/dev/null | sort -k3,3n -k2,2n -k1,1 -k4,4n
} >"$out/table.tsv"
# mean ± sd over seeds (sample sd; "–" for one seed) of each (lr, N, gem_ref)
{
	echo "# gem_ref commit against pull with gem-sim: cnn on Fashion-MNIST, momentum 0.9, batch 64,"
	echo "# one epoch per worker, round-robin arrivals; mean ± sd over seeds"
	echo
	echo "| lr | N | gem_ref | seeds | final loss | test loss | test accuracy | π clamped to 0 | scale |"
	echo "|---|---|---|---|---|---|---|---|---|"
	grep -v '^#' "$out/table.tsv" | awk -F'\t' '
		{ k = $3 "\t" $2 "\t" $1; if (!(k in c)) order[++nk] = k; c[k]++
		  for (i = 6; i <= 10; i++) { s[k, i] += $i; q[k, i] += $i * $i } }
		function ms(k, i,   m, v) {
			m = s[k, i] / c[k]
			if (c[k] < 2) return sprintf("%.4f", m)
			v = (q[k, i] - c[k] * m * m) / (c[k] - 1)
			return sprintf("%.4f ± %.4f", m, v > 0 ? sqrt(v) : 0)
		}
		END { for (j = 1; j <= nk; j++) { k = order[j]; split(k, f, "\t")
			printf "| %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", f[1], f[2], f[3], c[k],
				ms(k, 6), ms(k, 7), ms(k, 8), ms(k, 9), ms(k, 10) } }'
	echo
	echo "final loss: the mean minibatch loss of the last 100 central updates. π clamped to 0: the"
	echo "mean over updates of the fraction of all parameters whose π was 0. scale: the mean over"
	echo "updates of |π⊙Δθ|₁/|Δθ|₁."
} >"$out/table.md"

echo "gem-ref: $(grep -vc '^#' "$out/table.tsv") rows in $(($(date +%s) - started)) s: $out/table.tsv, $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
