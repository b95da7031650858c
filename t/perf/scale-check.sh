#!/bin/sh
# scale-check: gem-sim's server model against real runs (doc/scale.md, "Checked"). For each N
# of NS (default "16 100") and K of KS (default "1"): N real gem-work processes against gem-serve
# (K > 1: K gem-serve --shard I/K), rule gem on mlp, STEPS local steps each (default 20); then
# gem-sim with the same run options, lognormal step times (σ 0.55, the measured preset's) whose
# mean is the real run's cycle (N / its commits per second), --server-cost auto. Prints, per
# row, commits/s and staleness mean and p99 of both (from the logs: the applied commits).
# Commits/s is thus calibrated, not predicted; the staleness is the model's prediction.
# usage: sh t/perf/scale-check.sh [OUTDIR]   (GEM_BIN: the programs; default bin)
bin=${GEM_BIN:-bin}
out=${1:-build/scale-check}
mkdir -p "$out"
export GEM_SHARE_DIR=${GEM_SHARE_DIR:-${GEM_SRC:-.}/share/gem} GEM_LOG=warn
steps=${STEPS:-20}
opts="--model mlp --rule gem --lr 0.05 --batch 64 --seed 1"

# stats LOG...: commits/s over the logs' wall times, tau mean and p99 (shard 0's log: each
# shard takes every commit)
stats() {
	grep -h '"tau"' "$1" | sed -n 's/.*"time":\([0-9.e+]*\).*"tau":\([0-9]*\).*/\1 \2/p; s/.*"tau":\([0-9]*\).*"time":\([0-9.e+]*\).*/\2 \1/p' |
		sort -k2,2n | awk '{ t[++n] = $2; s += $2; if (!a || $1 < a) a = $1; if ($1 > b) b = $1 }
		END { printf "%.2f\t%.2f\t%d", (n - 1) / (b - a), s / n, t[int(0.99 * (n - 1)) + 1] }'
}

# vstats LOG: the same over its virtual times
vstats() {
	grep -h '"tau"' "$1" | sed -n 's/.*"tau":\([0-9]*\).*"vtime":\([0-9.e+-]*\).*/\2 \1/p; s/.*"vtime":\([0-9.e+-]*\).*"tau":\([0-9]*\).*/\1 \2/p' |
		sort -k2,2n | awk '{ t[++n] = $2; s += $2; if (n == 1 || $1 < a) a = $1; if ($1 > b) b = $1 }
		END { printf "%.2f\t%.2f\t%d", (n - 1) / (b - a), s / n, t[int(0.99 * (n - 1)) + 1] }'
}

real() { # N K DIR
	n=$1 k=$2 d=$3 spids=
	rm -rf "$d"
	"$bin/gem-init" -q --workers "$n" $opts "$d" || return 1
	s=0
	while [ $s -lt "$k" ]; do
		if [ "$k" = 1 ]; then o= sd=$d; else o="--shard $s/$k" sd=$d/shard-$s-of-$k; fi
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

printf '# N\tK\tsteps\treal_commits_per_s\treal_tau_mean\treal_tau_p99\tsim_commits_per_s\tsim_tau_mean\tsim_tau_p99\tsim_server_util\n'
for n in ${NS:-16 100}; do
for k in ${KS:-1}; do
	d=$out/real-n$n-k$k
	real "$n" "$k" "$d" || exit 1
	log=$d/log.jsonl
	[ "$k" = 1 ] || log=$d/shard-0-of-$k/log.jsonl
	r=$(stats "$log")
	cps=$(echo "$r" | cut -f1)
	mu=$(awk -v n="$n" -v c="$cps" 'BEGIN { printf "%.6f", log(n / c) - 0.55 * 0.55 / 2 }')
	sdir=$out/sim-n$n-k$k
	rm -rf "$sdir"
	"$bin/gem-sim" -q -n "$n" --steps "$steps" --shards "$k" --step-time "lognormal:$mu,0.55" \
		--speed-spread 0.04 --server-cost auto $opts "$sdir" >"$sdir.tsv" || exit 1
	slog=$sdir/log.jsonl
	[ "$k" = 1 ] || slog=$sdir/shard-0-of-$k/log.jsonl
	u=$(awk -F'\t' 'NR == 2 { print $14 }' "$sdir.tsv")
	printf '%d\t%d\t%d\t%s\t%s\t%s\n' "$n" "$k" "$steps" "$r" "$(vstats "$slog")" "$u"
done; done
