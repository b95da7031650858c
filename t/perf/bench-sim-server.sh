#!/bin/sh
# bench-sim-server: the server's CPU time per commit against real gem-serve runs, per model and
# codec, for gem-sim's server model (gem-sim --server-cost): W workers (BENCH_COST_WORKERS,
# default 4) commit S steps each (BENCH_COST_STEPS, default 100) with gem-work --codec C, the
# server under /usr/bin/time (user + system, joins and leaves included); then a least-squares
# fit of a·|θ| + b per codec over the models. Also what the real run saw: commits/s (commits
# over the server's wall time) and the staleness mean, p50, p99, max from its log. Prints TSV.
. "$(dirname "$0")/common.sh"
n=${BENCH_COST_WORKERS:-4}
steps=${BENCH_COST_STEPS:-100}
models=${BENCH_COST_MODELS:-mlp cnn}
codecs=${BENCH_COST_CODECS:-raw fp16 int8}

# run MODEL CODEC: one served run; prints its row
run() {
	d=$tmp/$1-$2
	data=
	[ "$1" = gpt ] && data="--data kjv"
	"$bin/gem-init" --workers "$n" --model "$1" $data --rule gem --lr 0.05 --batch 64 --seed 1 "$d" \
		>"$tmp/init" 2>&1 || { cat "$tmp/init" >&2; return 1; }
	params=$(sed -n 's/.*(\([0-9]*\) parameters).*/\1/p' "$tmp/init")
	/usr/bin/time -f '%U %S %e' -o "$tmp/serve" "$bin/gem-serve" --listen 127.0.0.1:0 \
		--max-workers "$n" "$d" >/dev/null 2>"$tmp/serve.err" &
	spid=$!
	i=0
	while [ ! -s "$d/server.url" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$d/server.url" ] || { cat "$tmp/serve.err" >&2; return 1; }
	i=0 pids=
	while [ $i -lt "$n" ]; do
		"$bin/gem-work" -q --server "$d" --codec "$2" --steps "$steps" >/dev/null 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	for p in $pids; do wait "$p"; done
	wait $spid
	sed -n 's/.*"tau":\([0-9]*\).*/\1/p' "$d/log.jsonl" | sort -n >"$tmp/tau"
	awk -v params="$params" -v m="$1" -v c="$2" -v n="$n" '
		NR == FNR { cpu = $1 + $2; wall = $3; next }
		{ t[++k] = $1; s += $1; if ($1 > mx) mx = $1 }
		END { printf "%s\t%s\t%d\t%d\t%d\t%.0f\t%.1f\t%.2f\t%d\t%d\t%d\n", m, c, params, n, k,
			1e6 * cpu / k, k / wall, s / k, t[int(0.5 * (k - 1)) + 1], t[int(0.99 * (k - 1)) + 1], mx }' \
		"$tmp/serve" "$tmp/tau"
}

echo "# model	codec	params	workers	commits	server_cpu_us_per_commit	commits_per_s	tau_mean	tau_p50	tau_p99	tau_max"
for m in $models; do
	for c in $codecs; do
		run "$m" "$c" || exit 1
	done
done | tee "$tmp/rows"
echo
echo "# codec	a_us_per_param	b_us	(server CPU per commit = a·params + b, least squares over the models)"
awk '{ k = $2; n[k]++; x[k] += $3; y[k] += $6; xx[k] += $3 * $3; xy[k] += $3 * $6 }
	END { for (k in n) { d = n[k] * xx[k] - x[k] * x[k]; a = d ? (n[k] * xy[k] - x[k] * y[k]) / d : 0
		printf "%s\t%.6g\t%.0f\n", k, a, (y[k] - a * x[k]) / n[k] } }' "$tmp/rows" | sort
