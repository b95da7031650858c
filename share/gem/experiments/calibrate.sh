#!/bin/sh
# calibrate.sh: measure when real gem-run workers commit, and fit gem-sim's timing model to it.
#
# usage: sh calibrate.sh [OUTDIR]          (default build/calibrate)
#
# For each model (MODELS, default "cnn mlp") and each N (NS, default "4 8 16"), one real
# `gem-run -n N` of STEPS steps per worker (default 150) on this machine. From the server's log
# (one line per commit: wall time and worker), the time between a worker's consecutive commits
# is one cycle: its training step, the commit's round trip, and its wait for the CPU. The first
# SKIP cycles of each worker (default 5: start-up) are dropped. The fit is the one gem-sim's
# --timing measured uses:
#
#     cycle of worker w at step k = T · f_w · e^(σ ε_wk),   f_w = e^(σ_w z_w),   ε, z ~ N(0, 1)
#
# σ (sigma_within) is the pooled standard deviation of log cycles around each worker's own mean,
# σ_w (sigma_between) the standard deviation of the workers' mean log cycles, T the median cycle.
# The tail columns say how well a lognormal fits: the fraction of standardised log cycles beyond
# ±2 (a normal gives 0.046) and the largest one.
#
# Writes OUTDIR/fit.tsv (one row per model and N) and keeps each run in OUTDIR/runs/.
# Environment: GEM_BIN where the gem programs are (default: PATH, then the source tree's bin/).
set -eu
out=${1:-build/calibrate}
. "$(dirname "$0")/common.sh"
mkdir -p "$out/runs"
fit=$out/fit.tsv
printf 'model\tN\tcycles\tmedian_ms\tsigma_within\tsigma_between\tbeyond_2sd\tmax_z\n' >"$fit.tmp"
for model in ${MODELS:-cnn mlp}; do
	for n in ${NS:-4 8 16}; do
		run=$out/runs/$model-n$n
		rm -rf "$run"
		echo "calibrate: $model, $n workers ($(date +%T))" >&2
		gem-run -q -n "$n" --model "$model" --epochs 1 --work-opt "--steps=${STEPS:-150}" "$run" \
			>"$run.eval" 2>"$run.err" || { cat "$run.err" >&2; exit 1; }
		# commit lines: "time":T ... "worker":W ... "tau": (events have "event")
		sed -n '/"event"/d; s/^{"time":\([0-9.]*\),.*"worker":\([0-9]*\),"tau".*/\2 \1/p' \
			"$run/log.jsonl" | sort -k1,1n -k2,2n |
		awk -v model="$model" -v n="$n" -v skip="${SKIP:-5}" '
			$1 != w { w = $1; k = 0; prev = "" }
			{ if (prev != "" && ++k > skip && $2 > prev) {
				x = log(($2 - prev) * 1000); m++
				who[m] = w; lx[m] = x; ms[m] = ($2 - prev) * 1000
				s[w] += x; c[w]++ }
			  prev = $2 }
			END {
				if (m < 10) { print "calibrate: too few cycles" > "/dev/stderr"; exit 1 }
				for (i = 1; i <= m; i++) { d = lx[i] - s[who[i]] / c[who[i]]; ss += d * d }
				nw = 0; for (v in c) { nw++; mu[nw] = s[v] / c[v]; tot += mu[nw] }
				sw = sqrt(ss / (m - nw))
				for (i = 1; i <= nw; i++) sb += (mu[i] - tot / nw) ^ 2
				sb = nw > 1 ? sqrt(sb / (nw - 1)) : 0
				for (i = 1; i <= m; i++) {
					z = (lx[i] - s[who[i]] / c[who[i]]) / sw; if (z < 0) z = -z
					if (z > 2) out2++; if (z > zmax) zmax = z }
				# the median cycle, by a simple sort of the m values
				for (i = 2; i <= m; i++) { v = ms[i]; j = i - 1
					while (j > 0 && ms[j] > v) { ms[j + 1] = ms[j]; j-- } ms[j + 1] = v }
				med = m % 2 ? ms[(m + 1) / 2] : (ms[m / 2] + ms[m / 2 + 1]) / 2
				printf "%s\t%d\t%d\t%.2f\t%.3f\t%.3f\t%.3f\t%.1f\n",
					model, n, m, med, sw, sb, out2 / m, zmax }' >>"$fit.tmp"
		tail -1 "$fit.tmp" >&2
	done
done
mv "$fit.tmp" "$fit"
cat "$fit"
