#!/bin/bash
# external-model.sh OUT: gem's built-in models against the same networks written in PyTorch and
# run as external models (gem-exec(7), share/gem/examples/torch/), under the same rule and
# budget, in gem-sim (deterministic: a cell's figure is the same on any machine, at any load):
#   cnn: the GEM paper's CNN on Fashion-MNIST, rule gem, 4 workers, one epoch each, batch 64
#   gpt: the byte-level GPT on kjv, rule diloco, 4 workers, H = 20, STEPS inner steps each,
#        AdamW as doc/results/ has it
# SEEDS (default "1 2 3"), STEPS (default 100), NETS (default "cnn gpt", or one of them). Restartable: a cell whose eval.tsv exists is
# kept. Prints TSV: net, model, seed, version, test_loss, test_acc (gpt: bits per byte, as
# gem-eval gives a text's).
set -euo pipefail
. "$(dirname "$0")/common.sh"
out=${1:-build/external-model}
seeds=${SEEDS:-1 2 3}
steps=${STEPS:-100}
share=$(cd "$(dirname "$0")/.." && pwd)
py=/usr/bin/python3
mkdir -p "$out"

cell() { # cell NET MODEL SEED gem-sim-options...
	local net=$1 model=$2 seed=$3 dir=$out/$1-$2-$3
	shift 3
	if [ ! -s "$dir/eval.tsv" ]; then
		rm -rf "$dir"
		gem-sim -q -n 4 -s "$seed" "$@" "$dir" >/dev/null
		gem-eval "$dir" >"$dir/eval.tsv"
	fi
	awk -v n="$net" -v m="$model" -v s="$seed" '!/^#/ {
		print n "\t" m "\t" s "\t" $2 "\t" $4 "\t" $5 }' "$dir/eval.tsv"
}

echo "# net	model	seed	version	test_loss	test_acc"
for seed in $seeds; do
	[ "${NETS:-cnn gpt}" != gpt ] || break
	cell cnn gem "$seed" -m cnn --rule gem -e 1
	cell cnn torch "$seed" -m "exec:$py $share/examples/torch/cnn.py" --rule gem -e 1
done
gpt_opts="--rule diloco --window 20 -b 32 --steps $steps --optimizer adamw --lr 1e-3 --warmup 20
	--clip 1 --weight-decay 0.1"
for seed in $seeds; do
	[ "${NETS:-cnn gpt}" != cnn ] || break
	# shellcheck disable=SC2086
	cell gpt gem "$seed" -m gpt -d kjv $gpt_opts
	# shellcheck disable=SC2086
	cell gpt torch "$seed" -m "exec:$py $share/examples/torch/gpt.py" $gpt_opts
done
