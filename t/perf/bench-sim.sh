#!/bin/sh
# bench-sim: gem-sim's speed with the paper's cnn on Fashion-MNIST, 20 workers of rule gem, on
# 1 and 2 threads. Prints TSV: threads, central updates, wall seconds, updates/s, samples/s.
# BENCH_SIM_STEPS steps per worker (default 50; 938 is the paper's one epoch: 18,760 updates).
bin=${GEM_BIN:-bin}
src=${GEM_SRC:-.}
steps=${BENCH_SIM_STEPS:-50}
[ -f "${GEM_DATA_PATH:-/usr/share/datasets}/fashion-mnist/train-labels-idx1-ubyte.gz" ] || {
	echo "# skipped: fashion-mnist not installed"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
GEM_SHARE_DIR=$src/share/gem "$bin/gem-init" -q --workers 20 --model cnn --rule gem --lr 0.05 \
	--momentum 0.9 --batch 64 --seed 1 "$tmp/base" || exit 1
echo "# threads	updates	seconds	updates_per_s	samples_per_s"
for t in 1 2; do
	rm -rf "$tmp/run" && cp -r "$tmp/base" "$tmp/run" &&
	"$bin/gem-sim" -q -n 20 --steps "$steps" --threads $t "$tmp/run" | awk -v t=$t '
		!/^#/ { printf "%d\t%d\t%.2f\t%.0f\t%.0f\n", t, $2, $11, $2 / $11, $3 / $11 }' || exit 1
done
