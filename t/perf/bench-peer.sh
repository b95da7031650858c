#!/bin/sh
# bench-peer: gem beside PyTorch on the same networks, in one run. For share/gem/models' mlp,
# cnn, resnet and gpt, and the resnet at 32×32×3 input (resnet-rgb32: a CIFAR-shaped image),
# on 1 and 2 threads: bench-train's training and evaluation rates (bench-train SECS MODEL
# [THREADS]) and peer-torch.py's for the same spec (the same layers, sizes, initialisation,
# batch and step: forward and backward, no optimiser update), one after the other, and their
# ratio (above 1: gem is faster). One thread: per second of CPU time on both sides; two: per
# second of wall-clock time, which other jobs on a shared machine slow down.
# Each pair runs BENCH_PEER_RUNS times (default 3), gem and PyTorch alternating, and a row
# gives the medians, their ratio, and each side's lowest and highest figure: PyTorch's rate
# can differ by a factor of two from one process to the next (doc/results/resnet-speed.md,
# "Operands read in place"), so one run of each is not a comparison.
# BENCH_PEER_SECS seconds per figure (default 2); BENCH_PEER_MODELS the models (default all);
# BENCH_PEER_THREADS the thread counts (default 1 2 2/micro2; T/microG: T threads, and gem's
# training steps in G micro-batches, each trained whole by a thread, nn/model.h's
# model_set_micro; PyTorch on T threads as before); BENCH_PEER_LIMIT the seconds a run may take
# (default 120).
src=${GEM_SRC:-.}
perf=$(dirname "$0")
secs=${BENCH_PEER_SECS:-2}
runs=${BENCH_PEER_RUNS:-3}
limit=${BENCH_PEER_LIMIT:-120}
models=${BENCH_PEER_MODELS:-mlp cnn resnet resnet-rgb32 gpt}
train=${GEM_PERF:-$src/build/rel/perf}/bench-train
[ -x "$train" ] || { echo "# skipped: bench-train not built"; exit 0; }
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "# skipped: python3-torch not installed"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
sed 's/"input": \[1, 28, 28\]/"input": [3, 32, 32]/' "$src/share/gem/models/resnet.json" >"$tmp/resnet-rgb32.json"
echo "# torch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $runs runs a pair, medians; the ranges are the lowest and highest of the runs"
echo "# what	shape	threads	gem	pytorch	unit	gem÷pytorch	gem range	pytorch range"
status=0
# a run that took more than $limit seconds (two threads on a crowded machine can: every
# fork-join waits for a core) is named, not counted as a failure; one that failed fails
ran() {
	[ "$2" = 0 ] && return
	if [ "$2" = 124 ]; then
		echo "# $m, $t threads: $1 took more than ${limit}s, stopped"
	else
		cat "$tmp/err" >&2
		status=1
	fi
}
for m in $models; do
	spec=$src/share/gem/models/$m.json
	[ -f "$spec" ] || spec=$tmp/$m.json
	for t in ${BENCH_PEER_THREADS:-1 2 2/micro2}; do
		n=${t%%/*}
		targ="$n"
		case $t in */micro*) targ="$n ${t##*/micro}" ;; esac
		[ "$t" = 1 ] && targ= # one thread: bench-train's CPU-time figures
		: >"$tmp/gem"
		: >"$tmp/torch"
		for r in $(seq $runs); do
			GEM_SRC=$src timeout $limit "$train" "$secs" "$spec" $targ >>"$tmp/gem" 2>"$tmp/err"
			ran "gem" $?
			OMP_NUM_THREADS=$n timeout $limit /usr/bin/python3 "$perf/peer-torch.py" "$secs" "$spec" \
				$n "$m" >>"$tmp/torch" 2>"$tmp/err"
			ran "PyTorch" $?
		done
		awk -F'\t' -v t=$t -f "$perf/peer-rows.awk" "$tmp/torch" "$tmp/gem"
	done
done
exit $status
