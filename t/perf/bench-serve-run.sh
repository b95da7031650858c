#!/bin/sh
# bench-serve-run: real runs against gem-serve, each worker and server a process of its own.
#   cnn: 16 cnn workers of rule gem, BENCH_RUN_STEPS (default 100) steps each: the server's CPU
#        time per commit and its share of all the CPU the run used (server + workers), and the
#        server's user and system seconds apart (system: the kernel's share, loopback TCP included).
#   scale: 100 mlp workers, BENCH_SCALE_STEPS (default 3) steps each, against one server and
#        against two slices (gem-serve --slice I/2): wall time, workers that failed, requests
#        the servers refused (log "refused" events), the servers' peak RSS (the larger slice's).
# CPU times and peak RSS from /usr/bin/time (GNU time). Prints TSV.
. "$(dirname "$0")/common.sh"

# cpu FILE: user + system seconds of a /usr/bin/time -f '%U %S %M' output
cpu() { awk '{ s += $1 + $2 } END { printf "%.3f", s }' "$@"; }

# run NAME MODEL WORKERS STEPS [SLICES]: serve a fresh run (with SLICES slices), train it, leave
# the figures in $tmp/NAME.*
run() {
	name=$1 model=$2 n=$3 steps=$4 k=${5:-1} d=$tmp/$1 spids=
	"$bin/gem-init" -q --workers "$n" --model "$model" --rule gem --lr 0.05 --batch 64 --seed 1 "$d" ||
		return 1
	s=0
	while [ $s -lt "$k" ]; do
		if [ "$k" = 1 ]; then opt= sdir=$d; else opt="--slice $s/$k" sdir=$d/slice-$s-of-$k; fi
		/usr/bin/time -f '%U %S %M' -o "$tmp/$name.serve$s" "$bin/gem-serve" --listen 127.0.0.1:0 \
			--max-workers "$n" $opt "$d" >/dev/null 2>"$tmp/$name.serve$s.err" &
		spids="$spids $!"
		i=0
		while [ ! -s "$sdir/server.url" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
		[ -s "$sdir/server.url" ] || { cat "$tmp/$name.serve$s.err" >&2; return 1; }
		s=$((s + 1))
	done
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
	for p in $spids; do wait "$p"; done
	t1=$(date +%s.%N)
	echo "$failed" >"$tmp/$name.failed"
	echo "$t0 $t1" | awk '{ printf "%.2f", $2 - $1 }' >"$tmp/$name.wall"
	# central updates and refusals, from the log
	cat "$d"/log.jsonl "$d"/slice-*/log.jsonl 2>/dev/null | grep -vc '"event"' >"$tmp/$name.commits"
	cat "$d"/log.jsonl "$d"/slice-*/log.jsonl 2>/dev/null | grep -c '"event":"refused"' \
		>"$tmp/$name.refused"
	return 0
}

steps=${BENCH_RUN_STEPS:-100}
run cnn cnn 16 "$steps" || exit 1
echo "# cnn workers	commits	wall_s	server_cpu_s	all_cpu_s	server_cpu_us_per_commit	server_share_pct	server_user_s	server_sys_s"
s=$(cpu "$tmp/cnn.serve0") w=$(cpu "$tmp"/cnn.w[0-9]*)
su=$(awk '{ printf "%.2f", $1 }' "$tmp/cnn.serve0") ss=$(awk '{ printf "%.2f", $2 }' "$tmp/cnn.serve0")
awk -v c="$(cat "$tmp/cnn.commits")" -v wall="$(cat "$tmp/cnn.wall")" -v s="$s" -v w="$w" -v su="$su" \
	-v ss="$ss" 'BEGIN {
	printf "16\t%d\t%.2f\t%.2f\t%.2f\t%.0f\t%.1f\t%s\t%s\n", c, wall, s, s + w, 1e6 * s / c,
		100 * s / (s + w), su, ss }'

echo
steps=${BENCH_SCALE_STEPS:-3}
echo "# scale workers	steps	slices	wall_s	failed_workers	refused	server_peak_rss_mb"
for k in 1 2; do
	run scale$k mlp 100 "$steps" $k || exit 1
	awk -v wall="$(cat "$tmp/scale$k.wall")" -v f="$(cat "$tmp/scale$k.failed")" -v k=$k \
		-v r="$(cat "$tmp/scale$k.refused")" -v steps="$steps" '
		$3 > m { m = $3 }
		END { printf "100\t%d\t%d\t%.2f\t%d\t%d\t%.0f\n", steps, k, wall, f, r, m / 1024 }' \
		"$tmp"/scale$k.serve[0-9]
done
