#!/bin/sh
# figures.sh: regenerate the figures of README.md and doc/results/gem-ref.md from real runs (make
# figures). The GEM paper's CNN is trained on Fashion-MNIST by gem-run with 8 asynchronous
# workers at lr 0.1, one epoch each, once under rule gem and once under downpour; then
#   OUTDIR/loss.png  the training loss of both runs (moving average), gem-plot-data loss
#   OUTDIR/pi.png    the mean GEM scaling factor pi per tensor over the gem run
#                    (gem-plot-data pi --stat mean: more than half of pi's elements clamp
#                    to 0, so the median stays near 0 and hides the differences between
#                    tensors that the mean shows)
# and prints one TSV line per run: the final smoothed training loss and gem-eval's test
# loss and accuracy. It takes a few minutes on 2 cores and replaces earlier runs and
# figures, so running it again gives the same files, with fresh numbers.
#
#   sh share/gem/figures.sh [OUTDIR [RUNSDIR]]     defaults share/gem/figures, build/figures
#
# Environment: WORKERS (8), LR (0.1), EPOCHS (1), SMOOTH (the loss's moving-average window,
# in central updates; 200), and gem-init options in GEM_FIGURES_OPTS (e.g. --seed 2).
# Exit status: 0 on success, 1 when a run or a plot failed, 2 on bad usage.
set -eu

[ $# -le 2 ] || { echo "usage: figures.sh [OUTDIR [RUNSDIR]]" >&2; exit 2; }
out=${1:-share/gem/figures}
runs=${2:-build/figures}
workers=${WORKERS:-8} lr=${LR:-0.1} epochs=${EPOCHS:-1} smooth=${SMOOTH:-200}
command -v gnuplot >/dev/null || { echo "figures.sh: gnuplot is needed" >&2; exit 1; }
mkdir -p "$out" "$runs"

for rule in gem downpour; do
	echo "figures.sh: cnn on Fashion-MNIST, $rule, $workers workers, lr $lr" >&2
	# shellcheck disable=SC2086 # GEM_FIGURES_OPTS is a list of options
	gem-run -q -n "$workers" --force --model cnn --rule "$rule" --lr "$lr" --momentum 0.9 \
		--batch 64 --epochs "$epochs" --seed 1 ${GEM_FIGURES_OPTS:-} "$runs/$rule" \
		>"$runs/$rule.eval"
done

# Write each picture beside its final name, then rename: a failed plot leaves the old one.
gem-plot-data --term png --output "$out/loss.png.tmp" --smooth "$smooth" loss \
	"$runs/gem" "$runs/downpour" | gnuplot
mv "$out/loss.png.tmp" "$out/loss.png"
gem-plot-data --term png --output "$out/pi.png.tmp" --stat mean pi "$runs/gem" | gnuplot
mv "$out/pi.png.tmp" "$out/pi.png"

printf '# rule\tworkers\tlr\ttrain_loss_avg%s\t%s\n' "$smooth" \
	"$(sed -n '1s/^# *//p' "$runs/gem.eval")"
for rule in gem downpour; do
	# the last moving average of the training loss: column 4 of the loss view
	loss=$(gem-plot-data --smooth "$smooth" loss "$runs/$rule" | awk '!/^#/ && NF { l = $4 } END { print l }')
	grep -v '^#' "$runs/$rule.eval" | sed "s/^/$rule	$workers	$lr	$loss	/"
done
echo "figures.sh: $out/loss.png $out/pi.png" >&2
