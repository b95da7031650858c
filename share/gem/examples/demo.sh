#!/bin/sh
# make demo: the GEM paper's recipe on Fashion-MNIST with 4 asynchronous workers on this
# machine (cnn, rule gem, lr 0.05, momentum 0.9, batch 64, kappa 1, one epoch per worker),
# then the test accuracy and, when gnuplot is there, a terminal plot of the training loss.
set -e
run=${1:-build/demo}
mkdir -p "$(dirname "$run")"
echo "demo: training cnn on Fashion-MNIST with 4 gem workers in $run (under a minute on 2 cores)" >&2
gem-run -n 4 --force --model cnn --rule gem --lr 0.05 --momentum 0.9 --batch 64 --kappa 1 \
	--epochs 1 --seed 1 "$run"
if command -v gem-plot-data >/dev/null && command -v gnuplot >/dev/null; then
	gem-plot-data --gnuplot --term dumb loss "$run/log.jsonl" | gnuplot
fi
