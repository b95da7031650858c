#!/bin/sh
# time-to-acc.sh: which rule reaches a test accuracy first with real worker processes on this
# machine? For each rule of RULES, N of NS, seed of SEEDS and slowdown of SLOW: one gem-serve,
# N gem-work processes (worker 0 SLOW times slower: --slowdown; 1 = equal workers) and a
# `gem-eval --follow` watching the server. The paper's recipe on Fashion-MNIST's cnn (lr LR,
# default 0.05, momentum 0.9, batch 64, one epoch per worker; STEPS steps instead when set).
#
# usage: sh time-to-acc.sh [OUTDIR]        (default build/time-to-acc)
#
# Per run: the server's training time when gem-eval first saw test accuracy >= TARGET (default
# 0.85; "-" when never), the final test accuracy and loss (gem-eval of the saved parameters),
# the final training loss (mean minibatch loss of the last 100 central updates), the wall time
# (start-up and evaluations included) and the seconds of training in all (train_seconds); its
# status: ok, diverged (workers gave up on a NaN loss or non-finite updates; counted in the
# tables as a run that ended where it was) or failed (left out of the tables).
# gem-eval shares the machine with the workers (one evaluation of 10000 test samples every
# INTERVAL seconds, default 2, when the version changed), which slows every rule alike.
# The rules sgp and overlap-sgp run N SGP nodes instead (gem-work --rule sgp, node 0 slowed the
# same way; node I trains N epochs of its part I/N: the samples of a worker's one epoch), and
# their accuracy is that of the nodes' average (gem-eval --nodes), sampled every INTERVAL
# seconds, each sample stamped when its evaluation ends: their seconds_to_TARGET count from
# when every node had started (loaded the data and listened), as a server's from its first
# join.
# Writes OUTDIR/runs.tsv, OUTDIR/summary.tsv (mean and sd over the seeds), OUTDIR/summary.md
# (the tables of doc/results/time-to-acc.md) and the figures OUTDIR/acc-slow1.png, acc-slow4.png (test accuracy
# against time, seed 1; their data in OUTDIR/curves/). Restartable: a run
# whose row exists is skipped. Defaults: RULES="gem downpour dynsgd easgd dcasgd sync dma sgp
# overlap-sgp", NS="4 8 16", SEEDS="1 2 3", SLOW="1 4".
# Environment: GEM_BIN where the gem programs are (default: PATH, then the source tree's bin/);
# TABLES_ONLY=1 runs nothing: the tables and figures from the rows there are.
set -u
out=${1:-build/time-to-acc}
. "$(dirname "$0")/common.sh"
target=${TARGET:-0.85}
mkdir -p "$out/runs" "$out/rows" || exit 1
# train_seconds RUN: the run's training time in all: the largest "elapsed" of its update lines
# (a server's: from its first join to its last update; SGP nodes': each node's own, the longest)
train_seconds() {
	cat "$1"/log.jsonl "$1"/node-*.jsonl 2>/dev/null |
		sed -n '/"event"/d; s/.*"elapsed":\([0-9.]*\),.*/\1/p' | sort -g | tail -1
}

one() { # RULE N SEED SLOW
	rule=$1 n=$2 seed=$3 slow=$4
	name=$rule-n$n-s$seed-slow$slow run=$out/runs/$rule-n$n-s$seed-slow$slow
	row=$out/rows/$name.tsv
	[ -s "$row" ] && return 0
	rm -rf "$run" "$run".*
	echo "time-to-acc: $name ($(date +%T))" >&2
	case $rule in *sgp) r= ;; *) r="--rule $rule" ;; esac
	gem-init -q --model cnn --data fashion-mnist $r --lr "${LR:-0.05}" --momentum 0.9 \
		--batch 64 --epochs 1 --seed "$seed" --workers "$n" "$run" 2>"$run.err" || return 1
	case $rule in *sgp) one_sgp; return ;; esac
	t0=$(date +%s.%N)
	gem-serve --listen 127.0.0.1:0 "$run" >/dev/null 2>>"$run.err" &
	spid=$!
	i=0 wpids=
	while [ $i -lt "$n" ]; do
		s=1; [ $i = 0 ] && s=$slow
		gem-work -q --server "$run" --slowdown "$s" ${STEPS:+--steps "$STEPS"} 2>>"$run.err" &
		wpids="$wpids $!"
		i=$((i + 1))
	done
	while [ ! -s "$run/server.url" ] && kill -0 $spid 2>/dev/null; do sleep 0.1; done
	gem-eval --follow "$run" --interval "${INTERVAL:-2}" >"$run.follow" 2>>"$run.err" &
	fpid=$!
	st=ok
	for p in $wpids; do wait "$p" || st=failed; done
	# workers that gave up on a diverged run (a NaN loss, or updates the server refused as
	# non-finite) leave the server waiting for them to come back: the run is over
	if [ $st = failed ] && grep -q "diverged\|non_finite" "$run.err"; then
		st=diverged
		kill -TERM $spid 2>/dev/null
	fi
	wait $spid || [ $st = diverged ] || st=failed
	wait $fpid
	t1=$(date +%s.%N)
	gem-eval "$run" >"$run.eval" 2>>"$run.err" || st=failed
	awk -v rule="$rule" -v n="$n" -v seed="$seed" -v slow="$slow" -v st="$st" -v target="$target" \
		-v loss="$(tail_loss "$run")" -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
		-v train="$(train_seconds "$run")" '
		FNR == 1 { f = FILENAME == ARGV[1] ? 1 : 2 } /^#/ { next }
		f == 1 && $5 >= target && tt == "" { tt = $1 }
		f == 2 { tl = $4; ta = $5 }
		END { printf "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", rule, n, seed, slow, st,
			tt == "" ? "-" : tt, ta, tl, loss, wall, train }' "$run.follow" "$run.eval" >"$row.tmp" &&
		mv "$row.tmp" "$row"
	cat "$row" >&2
}

# one_sgp (inside one): N SGP nodes on RUN, their average sampled while they train; the row.
one_sgp() {
	t0=$(date +%s.%N)
	i=0 wpids= ov=
	[ "$rule" = overlap-sgp ] && ov=--overlap
	len="--epochs $n"
	[ -z "${STEPS:-}" ] || len="--steps $STEPS"
	while [ $i -lt "$n" ]; do
		s=1; [ $i = 0 ] && s=$slow
		# node i trains on part i/N: N epochs of it are a worker's one epoch of samples
		gem-work -q --rule sgp --run "$run" --listen 127.0.0.1:0 --node $i --peers-file "$run/peers" \
			$ov --slowdown "$s" $len \
			>"$run/node-$i.url" 2>>"$run.err" &
		wpids="$wpids $!"
		i=$((i + 1))
	done
	i=0
	while [ $i -lt "$n" ]; do
		k=0
		until [ -s "$run/node-$i.url" ]; do
			k=$((k + 1)); [ $k -le 600 ] || { echo "time-to-acc: $name: node $i did not start" >&2; break; }
			sleep 0.1
		done
		head -1 "$run/node-$i.url"
		i=$((i + 1))
	done >"$run/peers.tmp"
	mv "$run/peers.tmp" "$run/peers"
	ts=$(date +%s.%N) # the nodes have loaded the data: they train from here
	urls=$(paste -sd, "$run/peers")
	# each sample is stamped when its evaluation has ended (the nodes' θ were fetched during it:
	# an upper bound of the time it shows, by the evaluation's own duration)
	while sleep "${INTERVAL:-2}"; do
		r=$(gem-eval --retry-for 10 --nodes "$urls" 2>/dev/null) || break
		printf '%s\n' "$r" | awk -F'\t' -v t0="$ts" -v t="$(date +%s.%N)" \
			'$1 == "average" { print t - t0 "\t" $2 "\t" $3 "\t" $4 "\t" $5 }'
	done >"$run.follow" &
	fpid=$!
	st=ok
	for p in $wpids; do wait "$p" || st=failed; done
	pkill -P $fpid 2>/dev/null # its gem-eval, retrying nodes that have ended
	kill $fpid 2>/dev/null
	wait $fpid 2>/dev/null
	t1=$(date +%s.%N)
	gem-eval --nodes "$run" >"$run.eval" 2>>"$run.err" || st=failed
	# the final training loss: the mean over the nodes of each node's last 100 minibatch losses
	loss=$(for f in "$run"/node-*.jsonl; do tail_loss_of "$f"; echo; done |
		awk '$1 != "nan" { s += $1; k++ } END { if (k) printf "%.4f", s / k; else printf "nan" }')
	awk -v rule="$rule" -v n="$n" -v seed="$seed" -v slow="$slow" -v st="$st" -v target="$target" \
		-v loss="$loss" -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')" \
		-v end="$(awk -v a="$ts" -v b="$t1" 'BEGIN { print b - a }')" -v train="$(train_seconds "$run")" '
		FNR == 1 { f = FILENAME == ARGV[1] ? 1 : 2 }
		f == 1 && $5 >= target && tt == "" { tt = $1 }
		f == 2 && $1 == "average" { tl = $4; ta = $5 }
		END { if (tt == "" && ta >= target) tt = end	# the end of the run is the last sample
		 printf "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t%.1f\t%s\n", rule, n, seed, slow, st,
			tt == "" ? "-" : sprintf("%.3f", tt), ta, tl, loss, wall, train }' \
		"$run.follow" "$run.eval" >"$row.tmp" && mv "$row.tmp" "$row"
	cat "$row" >&2
}

[ -n "${TABLES_ONLY:-}" ] ||
for slow in ${SLOW:-1 4}; do
for n in ${NS:-4 8 16}; do
for seed in ${SEEDS:-1 2 3}; do
for rule in ${RULES:-gem downpour dynsgd easgd dcasgd sync dma sgp overlap-sgp}; do
	one "$rule" "$n" "$seed" "$slow" || echo "time-to-acc: $rule-n$n-s$seed-slow$slow failed" >&2
done; done; done; done

printf 'rule\tN\tseed\tslowdown\tstatus\tseconds_to_%s\ttest_acc\ttest_loss\ttrain_loss\twall\ttrain_seconds\n' \
	"$target" >"$out/runs.tsv"
cat "$out"/rows/*.tsv | sort -k4,4n -k2,2n -k1,1 -k3,3n >>"$out/runs.tsv"
awk -F'\t' 'NR > 1 && ($5 == "ok" || $5 == "diverged") { k = $1 "\t" $2 "\t" $4; c[k]++; a[k] += $7; a2[k] += $7 * $7
		w[k] += $11; if ($6 != "-") { r[k]++; t[k] += $6; t2[k] += $6 * $6 } }
	function sd(s, s2, n) { return n > 1 && s2 - s * s / n > 0 ? sqrt((s2 - s * s / n) / (n - 1)) : 0 }
	END { for (k in c) printf "%s\t%d\t%d\t%s\t%s\t%.4f\t%.4f\t%.1f\n", k, c[k], r[k],
		r[k] ? sprintf("%.1f", t[k] / r[k]) : "-", r[k] ? sprintf("%.1f", sd(t[k], t2[k], r[k])) : "-",
		a[k] / c[k], sd(a[k], a2[k], c[k]), w[k] / c[k] }' "$out/runs.tsv" |
	sort -k3,3n -k2,2n -k1,1 >"$out/s.tmp"
{ printf 'rule\tN\tslowdown\truns\treached\tseconds_mean\tseconds_sd\ttest_acc_mean\ttest_acc_sd\ttrain_seconds_mean\n'
  cat "$out/s.tmp"; } >"$out/summary.tsv"
rm -f "$out/s.tmp"
cat "$out/summary.tsv"
# The same as markdown tables, one per slowdown: a row per rule, a column per N; each cell the
# mean seconds to TARGET over the seeds that reached it (with how many did, when not all), the
# mean training time of the whole run, and the mean final test accuracy.
awk -F'\t' -v rules="${RULES:-gem downpour dynsgd easgd dcasgd sync dma sgp overlap-sgp}" \
	-v ns="${NS:-4 8 16}" -v slows="${SLOW:-1 4}" -v target="$target" '
	NR > 1 { k = $1 " " $2 " " $3; runs[k] = $4; got[k] = $5; sec[k] = $6; acc[k] = $8; secs[k] = $10 }
	END {
		nr = split(rules, R, " "); nn = split(ns, N, " "); nsl = split(slows, S, " ")
		for (s = 1; s <= nsl; s++) {
			printf "%s\n\n", S[s] == 1 ? "Equal workers:" : "Worker 0 " S[s] "x slower:"
			printf "| rule |"; for (j = 1; j <= nn; j++) printf " N = %s |", N[j]; printf "\n|---|"
			for (j = 1; j <= nn; j++) printf "---|"; printf "\n"
			for (i = 1; i <= nr; i++) {
				printf "| %s |", R[i]
				for (j = 1; j <= nn; j++) {
					k = R[i] " " N[j] " " S[s]
					if (!(k in runs)) { printf " |"; continue }
					t = got[k] ? sec[k] " s" : "never"
					if (got[k] && got[k] < runs[k]) t = t " (" got[k] "/" runs[k] ")"
					printf " %s / %.0f s, %.3f |", t, secs[k], acc[k]
				}
				printf "\n"
			}
			printf "\n"
		}
		printf "Each cell: the mean seconds of training to test accuracy %s (over the seeds that " \
			"reached it) / the mean seconds of training of the whole run, and the mean final " \
			"test accuracy.\n", target
	}' "$out/summary.tsv" >"$out/summary.md"

# Figures: test accuracy against seconds of training, one panel per N, seed FIGSEED (default 1):
# OUTDIR/acc-slow1.png, acc-slow4.png (one per slowdown). Each curve is the run's evaluations
# while it trained, then its final accuracy at its last second of training (OUTDIR/curves/).
command -v gnuplot >/dev/null 2>&1 || exit 0
mkdir -p "$out/curves"
colors="#9400d3 #009e73 #56b4e9 #e69f00 #c0a000 #0072b2 #e51e10 #000000 #777777"
for slow in ${SLOW:-1 4}; do
	{
		set -- ${NS:-4 8 16}
		echo "set term pngcairo size $((460 * $#)),440 font ',10'"
		echo "set output '$out/acc-slow$slow.png'"
		echo "set multiplot layout 1,$#"
		echo "set grid; set key bottom right; set yrange [0.6:0.9]"
		echo "set xlabel 'seconds of training'; set ylabel 'test accuracy'"
		for n in "$@"; do
			plot= i=0
			for rule in ${RULES:-gem downpour dynsgd easgd dcasgd sync dma sgp overlap-sgp}; do
				i=$((i + 1))
				name=$rule-n$n-s${FIGSEED:-1}-slow$slow c=$out/curves/$name.tsv
				[ -s "$out/rows/$name.tsv" ] || continue
				{ awk '!/^#/ { print $1 "\t" $5 }' "$out/runs/$name.follow" 2>/dev/null
				  awk -F'\t' '$11 != "" { print $11 "\t" $7 }' "$out/rows/$name.tsv"; } >"$c"
				dt=1; case $rule in *sgp) dt=2 ;; esac
				col=$(echo "$colors" | cut -d' ' -f$(( (i - 1) % 9 + 1 )))
				plot="$plot${plot:+, }'$c' using 1:2 with steps lw 1.5 lc rgb '$col' dt $dt title '$rule'"
			done
			title="N = $n"; [ "$slow" = 1 ] || title="$title, worker 0 ${slow}x slower"
			echo "set title '$title'"
			if [ -n "$plot" ]; then echo "plot $plot"; else echo "plot 0 notitle"; fi
		done
		echo "unset multiplot"
	} | gnuplot 2>>"$out/gnuplot.err"
done
