#!/bin/sh
# gem-paper.sh: the GEM paper's §4.1 (Hermans & Louppe 2018, arXiv:1805.08469) with gem-sim, on
# Fashion-MNIST with the paper's cnn: lr 0.05, momentum 0.9, batch 64, each worker one epoch
# over its own shuffled copy of the training set; rules gem, downpour and dynsgd at N = 5, 10,
# 20, 30 workers, gem at N = 100 (and N = 16 for the π heat map); then a misspecified learning
# rate (lr 0.1) for gem and downpour at N = 5, 10, 20. Every row runs under each arrival model of
# ARRIVALS (gem-sim --timing): roundrobin (constant step times: workers commit in strict turn, the
# paper's own simulation) and measured (step times and worker speeds fitted to real gem-run
# workers, share/gem/experiments/calibrate.sh).
#
# usage: sh gem-paper.sh [OUTDIR]          (default build/experiment)
#
# Writes OUTDIR/table.tsv and OUTDIR/table.md (one row per run: rule, N, lr, seed, timing, status, final
# training loss = mean minibatch loss of the last 100 central updates, test loss and accuracy,
# median π = the median over all updates and parameter tensors of the logged per-tensor median
# π, effective scale = mean over updates of |π⊙Δθ|₁/|Δθ|₁, mean staleness, updates, seconds),
# and the figures OUTDIR/loss-lr0.05.png, loss-lr0.1.png (training loss against worker steps),
# pi-vs-n.png (median π and effective scale against N, with 1/N) and pi-n16-*.png (the π heat
# map of gem at N = 16: median, mean, scale), and OUTDIR/summary.md: mean ± sd over the seeds of
# each rule, N, lr and arrival model. Runs are in OUTDIR/runs/, curve data in OUTDIR/data/.
#
# Restartable: a row whose result (OUTDIR/rows/NAME.tsv) exists is skipped; rerun to finish.
# Environment: JOBS rows at once (default 2: one per core), THREADS gem-sim --threads per row
# (default 1), SEEDS (default "1 2 3"), ARRIVALS (default "roundrobin measured"), GEM_BIN where the gem programs are (default: PATH, then the
# source tree's bin/), STEPS (a quick check: S steps per worker instead of one epoch).
set -u

if [ "${1:-}" = --row ]; then
	# one row: --row OUTDIR RULE N LR SEED TIMING
	out=$2 rule=$3 n=$4 lr=$5 seed=$6 timing=$7
	name=$rule-n$n-lr$lr-s$seed
	[ "$timing" = roundrobin ] || name=$name-$timing
	res=$out/rows/$name.tsv
	run=$out/runs/$name
	[ -s "$res" ] && exit 0
	rm -rf "$run" "$run.sim" "$run.err" "$run.eval"
	echo "gem-paper: $name: start $(date +%T)" >&2
	gem-sim -q -n "$n" --timing "$timing" --threads "${THREADS:-1}" --model cnn --data fashion-mnist --rule "$rule" \
		--lr "$lr" --momentum 0.9 --batch 64 --epochs 1 --seed "$seed" ${STEPS:+--steps "$STEPS"} \
		"$run" >"$run.sim" 2>"$run.err"
	rc=$?
	case $rc in
	0) status=ok ;;
	1) grep -q diverged "$run.err" && status=diverged ;;
	esac
	if [ -z "${status:-}" ]; then
		echo "gem-paper: $name: gem-sim failed (exit $rc):" >&2
		tail -5 "$run.err" >&2
		exit 1
	fi
	gem-eval "$run" >"$run.eval" || { echo "gem-paper: $name: gem-eval failed" >&2; exit 1; }
	gem-plot-data --smooth 200 loss "$run" >"$out/data/loss-$name.tsv" 2>/dev/null
	# sim: workers version samples vtime loss tau_mean tau_max pi_median scale failed seconds
	# eval: elapsed version samples test_loss test_acc
	awk -v rule="$rule" -v n="$n" -v lr="$lr" -v seed="$seed" -v timing="$timing" -v status="$status" '
		FNR == 1 { f++ } /^#/ { next }
		f == 1 { loss = $5; tau = $6; pim = $8; scale = $9; updates = $2; secs = $11 }
		f == 2 { tl = $4; ta = $5 }
		END { printf "%s\t%d\t%s\t%s\t%s\t%s\t%.4f\t%.4f\t%.4f\t%.4g\t%.4f\t%.2f\t%d\t%.0f\n",
			rule, n, lr, seed, timing, status, loss, tl, ta, pim, scale, tau, updates, secs }' \
		"$run.sim" "$run.eval" >"$res.tmp" && mv "$res.tmp" "$res"
	echo "gem-paper: $name: $status, $(cut -f7-9 "$res" | tr '\t' ' ') ($(date +%T))" >&2
	exit 0
fi

out=${1:-build/experiment}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-sim >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-sim" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
export PATH THREADS STEPS
for p in gem-sim gem-init gem-eval gem-plot-data gnuplot; do
	command -v $p >/dev/null 2>&1 || { echo "gem-paper: $p not found (set GEM_BIN)" >&2; exit 1; }
done
JOBS=${JOBS:-2} THREADS=${THREADS:-1} SEEDS=${SEEDS:-1 2 3} STEPS=${STEPS:-}
ARRIVALS=${ARRIVALS:-roundrobin measured}
mkdir -p "$out/runs" "$out/rows" "$out/data" || exit 1
started=$(date +%s)

# The rows, the longest (most workers) first so that two cores stay busy to the end.
{
	for s in $SEEDS; do
		echo "gem 100 0.05 $s"
		for n in 30 20 10 5; do
			for r in gem downpour dynsgd; do echo "$r $n 0.05 $s"; done
		done
		echo "gem 16 0.05 $s"
		for n in 20 10 5; do
			for r in gem downpour; do echo "$r $n 0.1 $s"; done
		done
	done
} | while read -r row; do for a in $ARRIVALS; do echo "$row $a"; done; done |
	sort -s -k2,2nr >"$out/rows.list"

xargs -P "$JOBS" -L 1 sh "$0" --row "$out" <"$out/rows.list"
failed=$?

# The table: every row that has a result, in the paper's order.
head='rule	N	lr	seed	timing	status	final_loss	test_loss	test_acc	pi_median	scale	tau_mean	updates	seconds'
{
	echo "# $head"
	cat "$out"/rows/*.tsv 2>/dev/null | sort -k3,3n -k1,1 -k2,2n -k5,5 -k4,4n
} >"$out/table.tsv"
{
	echo "# GEM paper §4.1 with gem-sim: cnn on Fashion-MNIST, momentum 0.9, batch 64, one epoch per worker"
	echo
	echo "| $(echo "$head" | sed 's/\t/ | /g') |"
	echo "|$(echo "$head" | sed 's/[^\t]*/---/g; s/\t/|/g')|"
	grep -v '^#' "$out/table.tsv" | sed 's/\t/ | /g; s/^/| /; s/$/ |/'
	echo
	echo "final_loss: the mean minibatch loss of the last 100 central updates. pi_median: the median,"
	echo "over all updates and parameter tensors, of the per-tensor median π in the log (gem only)."
	echo "scale: the mean over updates of |π⊙Δθ|₁/|Δθ|₁ (gem only). status diverged: workers stopped"
	echo "on a non-finite loss, as gem-work does."
	echo
	echo "Figures: loss-lr0.05.png, loss-lr0.1.png, pi-vs-n.png, pi-n16-median.png, pi-n16-mean.png,"
	echo "pi-n16-scale.png."
} >"$out/table.md"

# mean ± sd over the seeds, per rule, N, lr and arrival model
awk -F'\t' '!/^#/ && $6 == "ok" { k = $1 " | " $2 " | " $3 " | " $5; c[k]++
		l[k] += $7; l2[k] += $7 * $7; a[k] += $9; a2[k] += $9 * $9 }
	!/^#/ && $6 != "ok" { k = $1 " | " $2 " | " $3 " | " $5; bad[k]++ }
	function sd(s, s2, n) { return n > 1 && s2 - s * s / n > 0 ? sqrt((s2 - s * s / n) / (n - 1)) : 0 }
	END { for (k in c) printf "| %s | %d | %d | %.3f ± %.3f | %.4f ± %.4f |\n", k, c[k], bad[k],
		l[k] / c[k], sd(l[k], l2[k], c[k]), a[k] / c[k], sd(a[k], a2[k], c[k])
		for (k in bad) if (!(k in c)) printf "| %s | 0 | %d | – | – |\n", k, bad[k] }' \
	"$out/table.tsv" | sort -t'|' -k4,4n -k2,2 -k3,3n -k5,5 >"$out/summary.body"
{
	echo "| rule | N | lr | arrivals | seeds ok | diverged | final loss | test accuracy |"
	echo "|---|---|---|---|---|---|---|---|"
	cat "$out/summary.body"
} >"$out/summary.md"
rm -f "$out/summary.body"

# Figures. Training loss (moving average of 200 updates) against worker steps = updates / N.
loss_plot() { # FILE LR RULES NS
	f=$1 lr=$2 rules=$3 ns=$4
	nr=$(echo $rules | wc -w)
	{
		echo "set term pngcairo size $((560 * nr)),460 font ',10'"
		echo "set output '$f'"
		echo "set multiplot layout 1,$nr title 'cnn on Fashion-MNIST, lr $lr: training loss (mean of 200 updates)'"
		echo "set xlabel 'worker steps (central updates / N)'; set ylabel 'loss'"
		echo "set yrange [0.2:1.5]; set logscale y; set key top right; set grid"
		for r in $rules; do
			plot=
			for n in $ns; do
				d=$out/data/loss-$r-n$n-lr$lr-s${SEEDS%% *}.tsv
				[ -s "$d" ] || continue
				plot="$plot${plot:+, }'$d' using (\$1/$n):4 with lines title 'N = $n'"
			done
			echo "set title '$r'"
			if [ -n "$plot" ]; then echo "plot $plot"; else echo "plot 2 notitle"; fi
		done
		echo "unset multiplot"
	} | gnuplot 2>>"$out/gnuplot.err"
}
loss_plot "$out/loss-lr0.05.png" 0.05 "gem downpour dynsgd" "5 10 20 30 100"
loss_plot "$out/loss-lr0.1.png" 0.1 "gem downpour" "5 10 20"

awk '!/^#/ && $1 == "gem" && $3 == 0.05 && $5 == "roundrobin"' "$out/table.tsv" | sort -k2,2n >"$out/data/pi-vs-n.tsv"
if [ -s "$out/data/pi-vs-n.tsv" ]; then
	gnuplot 2>>"$out/gnuplot.err" <<EOF
set term pngcairo size 700,500 font ',10'
set output '$out/pi-vs-n.png'
set title 'gem, lr 0.05: π against the number of workers'
set xlabel 'N (workers)'; set ylabel 'π'; set logscale xy; set grid; set key top right
set xrange [4:120]
plot '$out/data/pi-vs-n.tsv' using 2:(\$10 > 0 ? \$10 : 1/0) with linespoints title 'median π', \
     '' using 2:11 with linespoints title 'effective scale |π⊙Δθ|/|Δθ|', \
     1/x with lines dashtype 2 title '1/N'
EOF
fi

r16=$out/runs/gem-n16-lr0.05-s${SEEDS%% *}
if [ -s "$r16/log.jsonl" ]; then
	for stat in median mean scale; do
		gem-plot-data --stat $stat --term png -o "$out/pi-n16-$stat.png" pi "$r16" 2>>"$out/gnuplot.err" |
			gnuplot 2>>"$out/gnuplot.err"
	done
fi

echo "gem-paper: $(grep -vc '^#' "$out/table.tsv") rows in $(($(date +%s) - started)) s: $out/table.tsv, $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
