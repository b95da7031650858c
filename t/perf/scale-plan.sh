#!/bin/sh
# scale-plan: the gem-sim runs behind doc/scale.md's plan. For each model size P of MODELS
# ("name:params", default cnn, gpt and a 10M-parameter model), N of NS (default "1000 10000")
# and K of KS (default "1 4 16"), gem-sim runs N workers of STEPS (default 3) steps of T seconds
# each (STEP, default 0.1; σ 0.55 lognormal, the measured preset's spread) of a stand-in model
# (t/perf/mlp8.json, 6,370 parameters: the queue depends on times, not on the values), with
# the server cost and link of the real size: --server-cost A·P/p,B (A, B: the raw fit) and
# --bandwidth BW·p/P (BW: default 1.25e9 bytes/s, 10 Gb/s), so that every message takes the
# time one of P parameters would. Prints gem-sim's figures and its wall time and peak RSS
# (GNU time). usage: sh t/perf/scale-plan.sh [OUTDIR]   (GEM_BIN: the programs; default bin)
bin=${GEM_BIN:-bin}
src=${GEM_SRC:-.}
out=${1:-build/scale-plan}
mkdir -p "$out"
export GEM_SHARE_DIR=${GEM_SHARE_DIR:-$src/share/gem} GEM_LOG=warn
step=${STEP:-0.1}
steps=${STEPS:-3}
bw=${BW:-1.25e9}
p=6370
a=${COST_A:-3.8e-9}
b=${COST_B:-557e-6}
mu=$(awk -v t="$step" 'BEGIN { printf "%.6f", log(t) - 0.55 * 0.55 / 2 }')
printf '# model\tparams\tN\tK\tcommits_per_s\tserver_util\tlink_util\twait_mean\twait_p99\ttau_mean\ttau_p50\ttau_p99\ttau_max\tscale\twall_s\trss_mb\n'
for m in ${MODELS:-cnn:163790 gpt:875520 10M:10000000}; do
	name=${m%%:*} P=${m#*:}
	sa=$(awk -v a="$a" -v P="$P" -v p=$p 'BEGIN { printf "%.6g", a * P / p }')
	sbw=$(awk -v bw="$bw" -v P="$P" -v p=$p 'BEGIN { printf "%.6g", bw * p / P }')
	for n in ${NS:-1000 10000}; do
	for k in ${KS:-1 4 16}; do
		d=$out/$name-n$n-k$k
		rm -rf "$d"
		/usr/bin/time -f '%e %M' -o "$d.time" "$bin/gem-sim" -q -n "$n" --steps "$steps" \
			--slices "$k" --step-time "lognormal:$mu,0.55" --speed-spread 0.04 \
			--server-cost "$sa,$b" --bandwidth "$sbw" --model "$src/t/perf/mlp8.json" \
			--rule gem --lr 0.05 --batch 64 --seed 1 "$d" >"$d.tsv" 2>"$d.err" ||
			{ cat "$d.err" >&2; exit 1; }
		awk -F'\t' -v m="$name" -v P="$P" -v k="$k" 'NR == FNR { split($0, f, " "); w = f[1]; r = f[2]; next }
			FNR == 2 { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%.0f\n",
				m, P, $1, k, $13, $14, $15, $16, $17, $6, $18, $19, $7, $9, w, r / 1024 }' \
			"$d.time" "$d.tsv"
		rm -rf "$d"
	done; done
done
