#!/bin/sh
# compare.sh: compare update rules at several numbers of workers. Each rule is run with each
# worker count (one directory per run, OUTDIR/RULE-Wworkers) by gem-sim when it is installed
# (simulated workers on a virtual clock, in one process: any number of workers on a small
# machine) or else by gem-run (real workers on this machine); the final test loss and
# accuracy of every run (gem-eval) are gathered in OUTDIR/eval.tsv and printed, and the
# training loss of all runs is drawn in one picture, OUTDIR/loss.png, by gem-plot-data and
# gnuplot. Existing runs in OUTDIR are replaced.
#
#   sh compare.sh OUTDIR RULES WORKERS [gem-init options]
#   sh share/gem/examples/compare.sh cmp "gem downpour" "1 4 8" --model cnn --lr 0.1
#
# RULES and WORKERS are lists separated by spaces or commas.
#
# Environment:
#   GEM_RUNNER  the program that does one run: gem-sim or gem-run; default gem-sim if it is
#               in PATH, else gem-run. Any program called as they are (-q -n N
#               [gem-init options] RUNDIR) does. Options that only one of them takes
#               (gem-sim --jitter, gem-run --work-opt) go among the extra options.
#   SMOOTH      the loss's moving-average window, in central updates; default 50
#
# Exit status: 0 on success, 1 when a run or the plot failed, 2 on bad usage.
set -eu

usage() {
	echo "usage: compare.sh OUTDIR RULES WORKERS [gem-init options]" >&2
	exit 2
}
[ $# -ge 3 ] || usage
out=$1 rules=$(echo "$2" | tr , ' ') counts=$(echo "$3" | tr , ' ')
shift 3
[ -n "$rules" ] && [ -n "$counts" ] || usage
for n in $counts; do
	case $n in *[!0-9]* | 0) echo "compare.sh: not a worker count: $n" >&2; usage ;; esac
done
if [ -n "${GEM_RUNNER:-}" ]; then
	runner=$GEM_RUNNER
elif command -v gem-sim >/dev/null; then
	runner=gem-sim
else
	runner=gem-run
fi

mkdir -p "$out"
runs=
rm -f "$out/eval.tsv"
for rule in $rules; do
	for n in $counts; do
		dir="$out/$rule-${n}workers"
		echo "compare.sh: $runner: $rule with $n workers in $dir" >&2
		$runner -q -n "$n" --force --rule "$rule" "$@" "$dir" >"$dir.out" &&
			gem-eval "$dir" >"$dir.eval" ||
			{ echo "compare.sh: the run in $dir failed" >&2; exit 1; }
		[ -f "$out/eval.tsv" ] || sed -n '1s/^# */# rule	workers	/p' "$dir.eval" >"$out/eval.tsv"
		grep -v '^#' "$dir.eval" | sed "s/^/$rule	$n	/" >>"$out/eval.tsv"
		runs="$runs $dir"
	done
done
cat "$out/eval.tsv"

gem-plot-data --term png --output "$out/loss.png" --smooth "${SMOOTH:-50}" loss $runs >"$out/loss.gp"
gnuplot "$out/loss.gp"
echo "compare.sh: the training loss of every run is in $out/loss.png" >&2
