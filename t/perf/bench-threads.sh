#!/bin/sh
# bench-threads: bench-train on 1 and 2 threads, and before and after a change, alternating
# (doc/results/resnet-speed.md, "A thread pool and fused GroupNorm", "What the second core
# costs"). BENCH_NEW: the bench-train program (default $GEM_PERF/bench-train, as make bench
# runs it); BENCH_OLD: another one to alternate with (default none); BENCH_SECS seconds a
# figure (default 1); BENCH_FIRST, BENCH_RUNS the first and last round (1, 3); BENCH_MODELS
# (mlp cnn resnet gpt). Each row: round, model, build, threads ("cpu": one thread on CPU time,
# else wall clock), the load average, the rate in GB/s at which one core read 1 MB the other
# had just written (bench-cores beside bench-train; "-" without it: two threads scale only as
# far as this lets them), then bench-train's train and eval rates. BENCH_SPINS: pool spins the
# new build is also run with on 2 threads (default none). BENCH_MICRO: micro-batches the new
# build is also run with on 1 and 2 threads, build "new-microG" (default 2; "" none; each thread
# then trains a micro-batch whole, doc/results/resnet-speed.md, "Micro-batches"; evaluation
# is cut into a part a thread in every row). A run stopped after BENCH_LIMIT
# seconds (default 60; e8a142e's resnet on 2 threads under load can take many minutes) shows no
# figures.
new=${BENCH_NEW:-${GEM_PERF:?set BENCH_NEW, or GEM_PERF to the directory of bench-train}/bench-train}
old=${BENCH_OLD:-}
builds="new"
[ -n "$old" ] && builds="old new"
cores=$(dirname "$new")/bench-cores
secs=${BENCH_SECS:-1}
handoff() {
	if [ -x "$cores" ]; then
		BENCH_CORES_ROUNDS=2 "$cores" 0.1 handoff | awk -F'\t' '$1 == "other core wrote it" && $3 == 1048576 { print $4 }'
	else
		echo -
	fi
}
printf '# round\tmodel\tbuild\tthreads\tload\thandoff_GBps\ttrain\teval\n'
for r in $(seq ${BENCH_FIRST:-1} ${BENCH_RUNS:-3}); do
	for m in ${BENCH_MODELS:-mlp cnn resnet gpt}; do
		for t in cpu 1 2; do
			targ=$t
			[ $t = cpu ] && targ=
			for b in $builds; do
				eval prog=\$$b
				load=$(cut -d' ' -f1 /proc/loadavg)
				x=$(handoff)
				out=$(timeout ${BENCH_LIMIT:-60} "$prog" "$secs" "$m" $targ 2>/dev/null | awk -F'\t' '{ printf "%s\t", $3 }')
				printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$b" "$t" "$load" "$x" "$out"
			done
			[ $t = cpu ] && continue
			for g in ${BENCH_MICRO-2}; do
				load=$(cut -d' ' -f1 /proc/loadavg)
				x=$(handoff)
				out=$(timeout ${BENCH_LIMIT:-60} "$new" "$secs" "$m" $t $g 2>/dev/null | awk -F'\t' '{ printf "%s\t", $3 }')
				printf '%s\t%s\tnew-micro%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$g" "$t" "$load" "$x" "$out"
			done
			[ $t = 2 ] || continue
			for sp in $BENCH_SPINS; do
				load=$(cut -d' ' -f1 /proc/loadavg)
				x=$(handoff)
				out=$(BENCH_POOL_SPIN=$sp timeout ${BENCH_LIMIT:-60} "$new" "$secs" "$m" 2 2>/dev/null | awk -F'\t' '{ printf "%s\t", $3 }')
				printf '%s\t%s\tnew-spin%s\t%s\t%s\t%s\t%s\n' "$r" "$m" "$sp" "$t" "$load" "$x" "$out"
			done
		done
	done
done
