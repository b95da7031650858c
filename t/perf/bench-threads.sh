#!/bin/sh
# bench-threads: bench-train before and after a change, alternating, on 1 and 2 threads (doc/
# results/resnet-speed.md, "A thread pool and fused GroupNorm"). BENCH_OLD, BENCH_NEW: the two
# bench-train programs; BENCH_SECS seconds a figure (default 1); BENCH_FIRST, BENCH_RUNS the first and last round (1, 3);
# BENCH_MODELS (mlp cnn resnet gpt). Each row: round, model, build, threads ("cpu": one thread
# on CPU time, else wall clock), the load average, then bench-train's train and eval rates.
# BENCH_SPINS: pool spins the new build is also run with on 2 threads (default none). A run
# stopped after BENCH_LIMIT seconds (default 60; e8a142e's resnet on 2 threads under load can
# take many minutes) shows no figures.
old=${BENCH_OLD:?} new=${BENCH_NEW:?}
secs=${BENCH_SECS:-1}
for r in $(seq ${BENCH_FIRST:-1} ${BENCH_RUNS:-3}); do
	for m in ${BENCH_MODELS:-mlp cnn resnet gpt}; do
		for t in cpu 1 2; do
			targ=$t
			[ $t = cpu ] && targ=
			for b in old new; do
				eval prog=\$$b
				load=$(cut -d' ' -f1 /proc/loadavg)
				out=$(timeout ${BENCH_LIMIT:-60} "$prog" "$secs" "$m" $targ 2>/dev/null | awk -F'\t' '{ printf "%s\t", $3 }')
				printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$b" "$t" "$load" "$out"
			done
			[ $t = 2 ] || continue
			for sp in $BENCH_SPINS; do
				load=$(cut -d' ' -f1 /proc/loadavg)
				out=$(BENCH_POOL_SPIN=$sp timeout ${BENCH_LIMIT:-60} "$new" "$secs" "$m" 2 2>/dev/null | awk -F'\t' '{ printf "%s\t", $3 }')
				printf '%s\t%s\tnew-spin%s\t%s\t%s\t%s\n' "$r" "$m" "$sp" "$t" "$load" "$out"
			done
		done
	done
done
