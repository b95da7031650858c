#!/bin/sh
# bench-serve-run: real runs against gem-serve, each worker and server a process of its own.
#   cnn: 16 cnn workers of rule gem, BENCH_RUN_STEPS (default 100) steps each: the server's CPU
#        time per commit and its share of all the CPU the run used (server + workers).
#   scale: 100 mlp workers, BENCH_SCALE_STEPS (default 5) steps each: wall time, workers that
#        failed, requests the server refused (log "refused" events), the server's peak RSS.
# CPU times and peak RSS from /usr/bin/time (GNU time). Prints TSV.
bin=${GEM_BIN:-bin}
src=${GEM_SRC:-.}
[ -f "${GEM_DATA_PATH:-/usr/share/datasets}/fashion-mnist/train-labels-idx1-ubyte.gz" ] || {
	echo "# skipped: fashion-mnist not installed"; exit 0; }
[ -x /usr/bin/time ] || { echo "# skipped: /usr/bin/time (GNU time) not installed"; exit 0; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
export GEM_SHARE_DIR="$src/share/gem" GEM_LOG=warn

# cpu FILE: user + system seconds of a /usr/bin/time -f '%U %S %M' output
cpu() { awk '{ s += $1 + $2 } END { printf "%.3f", s }' "$@"; }

# run NAME MODEL WORKERS STEPS: serve a fresh run, train it, leave the figures in $tmp/NAME.*
run() {
	name=$1 model=$2 n=$3 steps=$4 d=$tmp/$1
	"$bin/gem-init" -q --workers "$n" --model "$model" --rule gem --lr 0.05 --batch 64 --seed 1 "$d" ||
		return 1
	/usr/bin/time -f '%U %S %M' -o "$tmp/$name.serve" "$bin/gem-serve" --listen 127.0.0.1:0 \
		--max-workers "$n" "$d" >/dev/null 2>"$tmp/$name.serve.err" &
	spid=$!
	i=0
	while [ ! -s "$d/server.url" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
	[ -s "$d/server.url" ] || { cat "$tmp/$name.serve.err" >&2; return 1; }
	t0=$(date +%s.%N)
	i=0 pids=
	while [ $i -lt "$n" ]; do
		/usr/bin/time -f '%U %S %M' -o "$tmp/$name.w$i" "$bin/gem-work" -q --server "$d" \
			--steps "$steps" >"$tmp/$name.w$i.err" 2>&1 &
		pids="$pids $!"
		i=$((i + 1))
	done
	failed=0
	for p in $pids; do wait "$p" || failed=$((failed + 1)); done
	wait "$spid"
	t1=$(date +%s.%N)
	echo "$failed" >"$tmp/$name.failed"
	echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }' >"$tmp/$name.wall"
	# central updates and refusals, from the log
	grep -vc '"event"' "$d/log.jsonl" >"$tmp/$name.commits"
	grep -c '"event":"refused"' "$d/log.jsonl" >"$tmp/$name.refused" || true
}

steps=${BENCH_RUN_STEPS:-100}
run cnn cnn 16 "$steps" || exit 1
echo "# cnn workers	commits	wall_s	server_cpu_s	all_cpu_s	server_cpu_us_per_commit	server_share_pct"
s=$(cpu "$tmp/cnn.serve") w=$(cpu "$tmp"/cnn.w[0-9]*)
awk -v c="$(cat "$tmp/cnn.commits")" -v wall="$(cat "$tmp/cnn.wall")" -v s="$s" -v w="$w" 'BEGIN {
	printf "16\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t%.1f\n", c, wall, s, s + w, 1e6 * s / c, 100 * s / (s + w) }'

echo
steps=${BENCH_SCALE_STEPS:-5}
run scale mlp 100 "$steps" || exit 1
echo "# scale workers	steps	shards	wall_s	failed_workers	refused	server_peak_rss_mb"
awk -v wall="$(cat "$tmp/scale.wall")" -v f="$(cat "$tmp/scale.failed")" -v r="$(cat "$tmp/scale.refused")" \
	-v steps="$steps" '{ printf "100\t%d\t1\t%.2f\t%d\t%d\t%.0f\n", steps, wall, f, r, $3 / 1024 }' "$tmp/scale.serve"
