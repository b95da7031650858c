#!/bin/sh
# scale-check: gem-sim against real runs (doc/scale.md, "Checked against real runs"). For each N
# of NS (default "16 100") and K of KS (default "1"): N real gem-work processes against gem-serve
# (K > 1: K gem-serve --slice I/K), rule gem on mlp, STEPS local steps each (default 200); then
# gem-sim of the same run.
#
# The real workers join over tens of seconds (each inflates the dataset on the shared cores) and
# leave over seconds, so a rate from the first commit to the last measures the joins and the
# stragglers' ends, not the run. Every figure is therefore also taken over the steady state, from
# the last join to the first leave, where all N train. The sim's step times are lognormal of σ
# SIGMA (default 0.55, the measured preset's) with mean the real steady cycle, N / (its steady
# commits/s), and a speed spread of 0.04: the steady commits/s is calibrated, not predicted; the
# staleness is the model's prediction.
#
# Prints one row per run: N, K, steps; the real run's join spread (first to last join, s), the log
# sd of its workers' steady intervals between commits, its commits/s, τ mean and τ p99 over the
# whole run and over the steady state; the sim's steady commits/s, τ mean, τ p99 and server
# utilisation.
# usage: sh t/perf/scale-check.sh [OUTDIR]   (GEM_BIN: the programs, default bin; REUSE=1: take
# the real runs already in OUTDIR)
bin=${GEM_BIN:-bin}
out=${1:-build/scale-check}
mkdir -p "$out"
export GEM_SHARE_DIR=${GEM_SHARE_DIR:-${GEM_SRC:-.}/share/gem} GEM_LOG=warn
steps=${STEPS:-200}
sigma=${SIGMA:-0.55}
opts="--model mlp --rule gem --lr 0.05 --batch 64 --seed 1"

# stats LOG FIELD: from a log's joins, leaves and applied commits, timed by FIELD (time or
# vtime): the join spread, the steady intervals' log sd, then commits/s, τ mean and τ p99 over
# the whole run and over the steady state (slice 0's log: each slice takes every commit)
stats() {
	awk -v f="\"$2\":" '
	function val(k,  i) { i = index($0, k); return i ? substr($0, i + length(k)) + 0 : "" }
	/"event":"join"/ && /"rejoin":false/ { t = val(f); if (!nj++ || t < j0) j0 = t; if (t > j1) j1 = t; next }
	/"event":"leave"/ { t = val(f); if (!nl++ || t < l0) l0 = t; next }
	/"tau":/ { n++; ct[n] = val(f); tau[n] = val("\"tau\":"); wk[n] = val("\"worker\":") }
	function row(lo, hi,  i, m, a, b, s, h, k, p, c) {
		split("", h)
		for (i = 1; i <= n; i++)
			if (ct[i] >= lo && ct[i] <= hi) {
				if (!m++ || ct[i] < a) a = ct[i]
				if (ct[i] > b) b = ct[i]
				s += tau[i]; h[tau[i]]++; if (tau[i] > k) k = tau[i]
			}
		p = int(0.99 * (m - 1)) + 1
		for (i = 0; i <= k; i++) if ((c += h[i]) >= p) break
		return sprintf("%.2f\t%.2f\t%d", (m - 1) / (b - a), s / m, i)
	}
	END {
		for (i = 1; i <= n; i++) {
			if (ct[i] >= j1 && ct[i] <= l0 && (wk[i] in last) && ct[i] > last[wk[i]]) {
				d = log(ct[i] - last[wk[i]]); nd++; sd += d; sd2 += d * d
			}
			last[wk[i]] = ct[i]
		}
		printf "%.1f\t%.2f\t%s\t%s", j1 - j0, (nd > 1 ? sqrt((sd2 - sd * sd / nd) / (nd - 1)) : 0),
			row(-1e300, 1e300), row(j1, l0)
	}' "$1"
}

real() { # N K DIR
	n=$1 k=$2 d=$3 spids=
	rm -rf "$d"
	"$bin/gem-init" -q --workers "$n" $opts "$d" || return 1
	s=0
	while [ $s -lt "$k" ]; do
		if [ "$k" = 1 ]; then o= sd=$d; else o="--slice $s/$k" sd=$d/slice-$s-of-$k; fi
		"$bin/gem-serve" --listen 127.0.0.1:0 --max-workers "$n" $o "$d" >/dev/null 2>"$d.serve$s" &
		spids="$spids $!"
		i=0
		while [ ! -s "$sd/server.url" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
		s=$((s + 1))
	done
	i=0 pids=
	while [ $i -lt "$n" ]; do
		"$bin/gem-work" -q --server "$d" --steps "$steps" >/dev/null 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	for p in $pids; do wait "$p"; done
	for p in $spids; do wait "$p"; done
}

printf '# N\tK\tsteps\treal_join_spread_s\treal_step_logsd\treal_commits_per_s\treal_tau_mean\treal_tau_p99\treal_steady_commits_per_s\treal_steady_tau_mean\treal_steady_tau_p99\tsim_steady_commits_per_s\tsim_steady_tau_mean\tsim_steady_tau_p99\tsim_server_util\n'
for n in ${NS:-16 100}; do
for k in ${KS:-1}; do
	d=$out/real-n$n-k$k
	[ -n "$REUSE" ] && [ -s "$d/params.gem" ] || real "$n" "$k" "$d" || exit 1
	log=$d/log.jsonl
	[ "$k" = 1 ] || log=$d/slice-0-of-$k/log.jsonl
	r=$(stats "$log" time)
	cps=$(echo "$r" | cut -f6)
	mu=$(awk -v n="$n" -v c="$cps" -v s="$sigma" 'BEGIN { printf "%.6f", log(n / c) - s * s / 2 }')
	simd=$out/sim-n$n-k$k
	rm -rf "$simd"
	"$bin/gem-sim" -q -n "$n" --steps "$steps" --slices "$k" --step-time "lognormal:$mu,$sigma" \
		--speed-spread 0.04 --server-cost auto $opts "$simd" >"$simd.tsv" || exit 1
	slog=$simd/log.jsonl
	[ "$k" = 1 ] || slog=$simd/slice-0-of-$k/log.jsonl
	u=$(awk -F'\t' 'NR == 2 { print $14 }' "$simd.tsv")
	printf '%d\t%d\t%d\t%s\t%s\t%s\n' "$n" "$k" "$steps" "$r" "$(stats "$slog" vtime | cut -f6-8)" "$u"
done; done
