#!/bin/sh
# bench-exec: what the bridge to an external model (gem-exec(7)) costs. The PyTorch cnn of
# share/gem/examples/torch at batch 64, one thread: its steps driven by gem-work --local through
# the child (the child's request, gem's momentum SGD on the shared θ), against the same
# network's plain PyTorch loop (forward, backward, torch.optim.SGD), per step, and their ratio:
# in wall time, and in CPU time of every process (the figure a loaded machine still gives; a
# quiet one gives both). Each figure is the difference of a run of 20 + N steps and one of 20,
# so that neither a process's start nor its first steps count. And a request to a trivial
# child (t/exec-numpy.py, a batch of one), per grad.
. "$(dirname "$0")/common.sh"
n=${BENCH_EXEC_STEPS:-300}
py=/usr/bin/python3
"$py" -c 'import torch' 2>/dev/null || { echo "# skipped: python3-torch not installed"; exit 0; }
cnn="$py $(cd "$src" && pwd)/share/gem/examples/torch/cnn.py --limit 6400"
export GEM_EXEC_THREADS=1

# cost STEPS CMD...: "wall cpu" seconds of CMD (its waited-for children's CPU included)
cost() {
	_s=$1; shift
	_t0=$(date +%s.%N)
	/usr/bin/time -f "%U %S" -o "$tmp/cpu" "$@" >/dev/null 2>&1 || return 1
	_t1=$(date +%s.%N)
	awk -v a="$_t0" -v b="$_t1" '{ print b - a, $1 + $2 }' "$tmp/cpu"
}
# work RUN STEPS: gem-work --local's cost for STEPS steps of a copy of RUN
work() { rm -rf "$tmp/w" && cp -r "$1" "$tmp/w" && cost "$2" "$bin/gem-work" -t "$2" --local "$tmp/w"; }
# per A B N: per-step wall and CPU microseconds of the difference of "wall cpu" pairs A and B
per() { echo "$1 $2" | awk -v n="$3" '{ printf "%.0f %.0f", ($3 - $1) / n * 1e6, ($4 - $2) / n * 1e6 }'; }

"$bin/gem-init" -q --model "exec:$cnn" -b 64 -e 100 "$tmp/cnn" || exit 1
g=$(per "$(work "$tmp/cnn" 20)" "$(work "$tmp/cnn" $((20 + n)))" "$n") || exit 1
p=$(per "$(cost 20 $cnn --bench 20)" "$(cost $((20 + n)) $cnn --bench $((20 + n)))" "$n") || exit 1
echo "# what	steps	us_per_step_wall	us_per_step_cpu	ratio_wall	ratio_cpu"
echo "$p $g" | awk -v n="$n" '{
	printf "plain PyTorch loop\t%d\t%d\t%d\t1.000\t1.000\n", n, $1, $2
	printf "gem-work --local via the child\t%d\t%d\t%d\t%.3f\t%.3f\n", n, $3, $4, $3 / $1, $4 / $2 }'

"$bin/gem-init" -q --model "exec:$py $(cd "$src" && pwd)/t/exec-numpy.py" -b 1 -e 1000 "$tmp/tiny" || exit 1
t=$(per "$(work "$tmp/tiny" 100)" "$(work "$tmp/tiny" 2100)" 2000) || exit 1
echo "$t" | awk '{ printf "a request to a trivial child (its numpy included)\t2000\t%d\t%d\t-\t-\n", $1, $2 }'
