#!/bin/sh
# state-precision.sh: gem's per-worker state on the server (m_w, s_w) in float32 against
# bfloat16 (gem-init --state-precision bf16: rounded to nearest even on store), with gem-sim:
# cnn on Fashion-MNIST, lr 0.05, momentum 0.9, batch 64, round-robin arrivals, N = 30 and 100
# workers, a budget of TOTAL commits in all (TOTAL/N steps per worker: short, for a shared
# machine), seeds 1-3.
#
# usage: sh state-precision.sh [OUTDIR]          (default build/experiment-state-precision)
#
# Writes OUTDIR/table.tsv (one row per run: precision, N, steps, seed, status, final training
# loss = mean minibatch loss of the last 100 central updates, test loss and accuracy, scale =
# mean over updates of |π⊙Δθ|₁/|Δθ|₁, gem-sim's peak resident kB, seconds) and OUTDIR/table.md
# (mean ± sd over the seeds of each precision and N).
#
# Restartable: a row whose result (OUTDIR/rows/NAME.tsv) exists is skipped; rerun to finish.
# Environment: JOBS rows at once (default 2), SEEDS (default "1 2 3"), NS (default "100 30"),
# TOTAL (default 3000), GEM_BIN where the gem programs are (default: PATH, then the source
# tree's bin/).
set -u

if [ "${1:-}" = --row ]; then
	# one row: --row OUTDIR PRECISION N SEED
	out=$2 prec=$3 n=$4 seed=$5
	steps=$((TOTAL / n))
	name=$prec-n$n-s$seed
	res=$out/rows/$name.tsv
	run=$out/runs/$name
	[ -s "$res" ] && exit 0
	rm -rf "$run" "$run.sim" "$run.err" "$run.eval"
	echo "state-precision: $name: start $(date +%T)" >&2
	/usr/bin/time -f "rss_kb %M" -o "$run.time" gem-sim -q -n "$n" --model cnn \
		--data fashion-mnist --rule gem --state-precision "$prec" --lr 0.05 --momentum 0.9 \
		--batch 64 --steps "$steps" --seed "$seed" "$run" >"$run.sim" 2>"$run.err"
	rc=$?
	status=
	case $rc in
	0) status=ok ;;
	1) grep -q diverged "$run.err" && status=diverged ;;
	esac
	if [ -z "$status" ]; then
		echo "state-precision: $name: gem-sim failed (exit $rc):" >&2
		tail -5 "$run.err" >&2
		exit 1
	fi
	gem-eval "$run" >"$run.eval" || { echo "state-precision: $name: gem-eval failed" >&2; exit 1; }
	# sim: workers version samples vtime loss tau_mean tau_max pi_median scale failed seconds zero
	# eval: elapsed version samples test_loss test_acc
	awk -v prec="$prec" -v n="$n" -v steps="$steps" -v seed="$seed" -v status="$status" '
		FNR == 1 { f++ } /^#/ { next }
		f == 1 { loss = $5; scale = $9; secs = $11 }
		f == 2 { tl = $4; ta = $5 }
		f == 3 && $1 == "rss_kb" { rss = $2 }
		END { printf "%s\t%d\t%d\t%s\t%s\t%.4f\t%.4f\t%.4f\t%.4f\t%d\t%.0f\n",
			prec, n, steps, seed, status, loss, tl, ta, scale, rss, secs }' \
		"$run.sim" "$run.eval" "$run.time" >"$res.tmp" && mv "$res.tmp" "$res"
	echo "state-precision: $name: $status, $(cut -f6-10 "$res" | tr '\t' ' ') ($(date +%T))" >&2
	exit 0
fi

out=${1:-build/experiment-state-precision}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-sim >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-sim" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
TOTAL=${TOTAL:-3000}
export PATH TOTAL
for p in gem-sim gem-eval; do
	command -v $p >/dev/null 2>&1 || { echo "state-precision: $p not found (set GEM_BIN)" >&2; exit 1; }
done
JOBS=${JOBS:-2} SEEDS=${SEEDS:-1 2 3} NS=${NS:-100 30}
mkdir -p "$out/runs" "$out/rows" || exit 1
started=$(date +%s)

for s in $SEEDS; do
	for n in $NS; do
		for prec in f32 bf16; do echo "$prec $n $s"; done
	done
done >"$out/rows.list"

xargs -P "$JOBS" -L 1 sh "$0" --row "$out" <"$out/rows.list"
failed=$?

head='precision	N	steps	seed	status	final_loss	test_loss	test_acc	scale	rss_kb	seconds'
{
	echo "# $head"
	cat "$out"/rows/*.tsv 2>/dev/null | sort -k2,2n -k1,1r -k4,4n
} >"$out/table.tsv"
# mean ± sd over seeds (sample sd; one seed: the value) of each (N, precision)
{
	echo "# gem's state in f32 against bf16 with gem-sim: cnn on Fashion-MNIST, lr 0.05, momentum"
	echo "# 0.9, batch 64, $TOTAL commits in all, round-robin arrivals; mean ± sd over seeds"
	echo
	echo "| N | steps per worker | state | seeds | final loss | test loss | test accuracy | scale | gem-sim peak RSS |"
	echo "|---|---|---|---|---|---|---|---|---|"
	grep -v '^#' "$out/table.tsv" | awk -F'\t' '
		{ k = $2 "\t" $1; if (!(k in c)) order[++nk] = k; c[k]++; steps[k] = $3
		  for (i = 6; i <= 10; i++) { s[k, i] += $i; q[k, i] += $i * $i } }
		function ms(k, i,   m, v) {
			m = s[k, i] / c[k]
			if (c[k] < 2) return sprintf("%.4f", m)
			v = (q[k, i] - c[k] * m * m) / (c[k] - 1)
			return sprintf("%.4f ± %.4f", m, v > 0 ? sqrt(v) : 0)
		}
		END { for (j = 1; j <= nk; j++) { k = order[j]; split(k, f, "\t")
			printf "| %s | %s | %s | %d | %s | %s | %s | %s | %.0f MB |\n", f[1], steps[k], f[2],
				c[k], ms(k, 6), ms(k, 7), ms(k, 8), ms(k, 9), s[k, 10] / c[k] / 1024 } }'
	echo
	echo "final loss: the mean minibatch loss of the last 100 central updates. scale: the mean"
	echo "over updates of |π⊙Δθ|₁/|Δθ|₁. RSS: gem-sim's whole process (its virtual workers too)."
} >"$out/table.md"

echo "state-precision: $(grep -vc '^#' "$out/table.tsv") rows in $(($(date +%s) - started)) s: $out/table.tsv, $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
