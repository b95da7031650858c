#!/bin/bash
# lm-rules.sh: which rule for a language model: the rules at equal tokens in gem-sim (virtual
# clock: the results do not depend on the machine's load), on a byte-level gpt and kjv, with
# equal workers, one straggler, and a slow server link with and without int8.
#
# usage: bash lm-rules.sh [OUTDIR]          (default build/experiment-lm-rules)
#
# Each cell is one gem-sim run of RULE with N workers under a CONDITION and a SEED; every run
# has the same tokens in all: STEPS_TOTAL worker steps (STEPS_TOTAL / N each) of batch 32
# windows, AdamW as in doc/results.md (lr 1e-3, warm-up 50, clip 1, weight decay 0.1, then a
# constant lr), every local step STEP_TIME virtual seconds (a constant, default 0.035: a step of
# gpt-small on one core of the 2-core test machine). The rules (RULES, names of this script):
#   sync          --rule sync
#   gem           --rule gem (a commit per step)
#   gem-w         --rule gem --window H
#   diloco        --rule diloco --window H (outer lr 0.7, momentum 0.9)
#   adiloco       --rule async-diloco --window H --outer-lr 0.7/N --delayed-nesterov N
#   adiloco-dyn   the same with --dynamic-local-updates
#   sdiloco       --rule diloco --window H --fragments P --mix 0.5 --overlap T (P, T: FRAGMENTS,
#                 OVERLAP)
# sgp is not a cell: gem-sim does not simulate it. The conditions (CONDS):
#   equal         equal workers, no link limit
#   strag         --stragglers 1:4 (worker 0 four times slower)
#   bw100, bw10   --bandwidth 12500000 or 1250000 (the server's link at 100 or 10 Mbit/s)
#   bw100+int8, bw10+int8   the same with --codec int8
# Per cell, in OUTDIR/rows/NAME: held-out bits per byte and next-byte accuracy of the final θ
# (gem-eval), the bytes on the wire (gem-sim's bytes_in + bytes_out), the virtual time at the
# end, the central updates, the CPU seconds of gem-sim and gem-eval (GNU time: user + system).
# The table (OUTDIR/runs.tsv, OUTDIR/table.md) adds the virtual time at which the training loss
# in bits per byte (the mean of the minibatch losses of the updates within the last WINDOW
# samples, default 3,200: 100 worker steps) first reaches each of two targets ("-": never):
# TARGETS_N for runs of N workers, else TARGETS (chosen from sync's curves: 3.5 and 3.4 at 4
# workers, 3.9 and 3.8 at 8, whose sync ends higher at the same tokens).
#
# Environment: MODEL (default gpt-small.json beside this script: the gpt's sibling, 2 blocks of
# width 64 over windows of 64 bytes, 137,216 parameters, a tenth of its cost per step), DATA
# (kjv), WORKERS ("4 8"), CONDS (all six), RULES (all seven), SEEDS ("1"), CELLS (in place of
# the grid: "RULE:N:COND" separated by spaces), STEPS_TOTAL (800), H (20), FRAGMENTS (2),
# OVERLAP (5), STEP_TIME, TARGETS ("3.5 3.4"), TARGETS_8 ("3.9 3.8"), WINDOW, PARTS ("runs table
# figures"), FIGDIR (default OUTDIR/figures), PRIOR (a file of runs.tsv rows measured before,
# whose runs are not in OUTDIR: the table takes those of the cells and seeds OUTDIR has no row
# of), GEM_BIN (where the gem programs are). Restartable:
# a cell whose row exists is skipped. Two instances on the same OUTDIR share the cells (each
# claims a cell by making OUTDIR/lock/NAME); run them under nice -n 19 on a shared machine: the
# figures do not depend on it.
set -u

out=${1:-build/experiment-lm-rules}
. "$(dirname "$0")/common.sh"
for p in gem-sim gem-eval gem-plot-data; do
	command -v $p >/dev/null 2>&1 || { echo "lm-rules: $p not found (set GEM_BIN)" >&2; exit 1; }
done
MODEL=${MODEL:-$_here/gpt-small.json} DATA=${DATA:-kjv} WORKERS=${WORKERS:-4 8} SEEDS=${SEEDS:-1}
CONDS=${CONDS:-equal strag bw100 bw10 bw100+int8 bw10+int8}
RULES=${RULES:-sync gem gem-w diloco adiloco adiloco-dyn sdiloco}
STEPS_TOTAL=${STEPS_TOTAL:-800} H=${H:-20} FRAGMENTS=${FRAGMENTS:-2} OVERLAP=${OVERLAP:-5}
STEP_TIME=${STEP_TIME:-0.035} TARGETS=${TARGETS:-3.5 3.4} TARGETS_8=${TARGETS_8:-3.9 3.8}
WINDOW=${WINDOW:-3200}
PARTS=${PARTS:-runs table figures} FIGDIR=${FIGDIR:-$out/figures} CELLS=${CELLS:-} PRIOR=${PRIOR:-}
mkdir -p "$out/runs" "$out/rows" "$out/lock" || exit 1

# rule_opts RULE N: the gem-init options of RULE with N workers
rule_opts() {
	local lr_n
	lr_n=$(awk -v n="$2" 'BEGIN { printf "%g", 0.7 / n }')
	case $1 in
	sync) echo "--rule sync" ;;
	gem) echo "--rule gem" ;;
	gem-w) echo "--rule gem --window $H" ;;
	diloco) echo "--rule diloco --window $H" ;;
	adiloco) echo "--rule async-diloco --window $H --outer-lr $lr_n --delayed-nesterov $2" ;;
	adiloco-dyn) echo "--rule async-diloco --window $H --outer-lr $lr_n --delayed-nesterov $2 --dynamic-local-updates" ;;
	sdiloco) echo "--rule diloco --window $H --fragments $FRAGMENTS --mix 0.5 --overlap $OVERLAP" ;;
	*) return 1 ;;
	esac
}

# cond_opts COND: its gem-sim options
cond_opts() {
	local o="--step-time const:$STEP_TIME"
	case $1 in
	equal) ;;
	strag) o="$o --stragglers 1:4" ;;
	bw100) o="$o --bandwidth 12500000" ;;
	bw10) o="$o --bandwidth 1250000" ;;
	bw100+int8) o="$o --bandwidth 12500000 --codec int8" ;;
	bw10+int8) o="$o --bandwidth 1250000 --codec int8" ;;
	*) return 1 ;;
	esac
	echo "$o"
}

# claim NAME: 0 when this instance may run cell NAME (its lock made, or left by a process gone)
claim() {
	local l=$out/lock/$1 pid
	if mkdir "$l" 2>/dev/null; then echo $$ >"$l/pid"; return 0; fi
	pid=$(cat "$l/pid" 2>/dev/null)
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && return 1
	echo $$ >"$l/pid"
}

# cell RULE N COND SEED: one run and its row, unless done or claimed
cell() {
	local rule=$1 n=$2 cond=$3 seed=$4 name run ropts copts status=ok steps cpu
	name=$rule-n$n-${cond/+/-}-s$seed run=$out/runs/$name
	[ -s "$out/rows/$name" ] && return 0
	ropts=$(rule_opts "$rule" "$n") || { echo "lm-rules: unknown rule $rule" >&2; return 1; }
	copts=$(cond_opts "$cond") || { echo "lm-rules: unknown condition $cond" >&2; return 1; }
	claim "$name" || return 0
	steps=$((STEPS_TOTAL / n))
	echo "lm-rules: $name: start $(date +%T)" >&2
	rm -rf "$run"
	# shellcheck disable=SC2086
	if ! /usr/bin/time -f '%U %S' -o "$run.cpu" gem-sim -q -n "$n" -t "$steps" $copts -m "$MODEL" \
		-d "$DATA" -b 32 --optimizer adamw --lr 1e-3 --warmup 50 --clip 1 --weight-decay 0.1 \
		--seed "$seed" $ropts "$run" >"$run.sim" 2>"$run.err"; then
		status=failed
		grep -q diverged "$run.err" && status=diverged
	fi
	/usr/bin/time -f '%U %S' -a -o "$run.cpu" gem-eval "$run" >"$run.tsv" 2>>"$run.err" || status=failed
	cpu=$(awk '{ s += $1 + $2 } END { printf "%.1f", s }' "$run.cpu")
	# gem-sim's summary line (under its # header) and gem-eval's: one row
	awk -v r="$rule" -v n="$n" -v c="$cond" -v s="$seed" -v st="$status" -v cpu="$cpu" '
		FNR == 1 { for (i = 1; i <= NF; i++) col[FILENAME, $(i + 1)] = i; next }
		FILENAME ~ /\.sim$/ { v = $col[FILENAME, "version"]; vt = $col[FILENAME, "vtime"]
			b = $col[FILENAME, "bytes_in"] + $col[FILENAME, "bytes_out"] }
		FILENAME ~ /\.tsv$/ { bpb = $col[FILENAME, "test_bpb"]; acc = $col[FILENAME, "test_acc"] }
		END { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%.0f\t%s\t%s\t%s\n", r, n, c, s, st, bpb, acc, b, vt, v, cpu }' \
		"$run.sim" "$run.tsv" >"$out/rows/$name.tmp" && mv "$out/rows/$name.tmp" "$out/rows/$name"
	echo "lm-rules: $name: $(cut -f5- "$out/rows/$name" | tr '\t' ' ') ($(date +%T))" >&2
}

# targets N: the two targets of runs with N workers: TARGETS_N, else TARGETS
targets() { local v=TARGETS_$1; echo "${!v:-$TARGETS}"; }

# to_targets LOG N: the virtual time at which the training loss over the last WINDOW samples, in
# bits per byte, first reaches each of N workers' two targets ("-": never)
to_targets() {
	printf '\t%s' "$(targets "$2")"
	sed -n '/"event"/d; s/.*"vtime":\([0-9.e+-]*\),.*"loss":\([-0-9.eE+naif]*\),"samples":\([0-9]*\).*/\1 \2 \3/p' "$1" |
		awk -v targets="$(targets "$2")" -v w="$WINDOW" '
		BEGIN { nt = split(targets, tg, " ") }
		{ t[NR] = $1; l[NR] = $2; s[NR] = $3
		  # the updates within the last w samples: from the first j whose samples exceed s - w
		  while (s[j0] <= $3 - w && j0 < NR) { sum -= l[j0] * (s[j0] - s[j0 - 1]); j0++ }
		  if (NR == 1) { j0 = 1; s[0] = 0 }
		  sum += $2 * ($3 - s[NR - 1])
		  if ($3 >= w) for (i = 1; i <= nt; i++)
			if (!(i in at) && sum / ($3 - s[j0 - 1]) / log(2) <= tg[i]) at[i] = $1 }
		END { for (i = 1; i <= nt; i++) printf "\t%s", i in at ? sprintf("%.1f", at[i]) : "-" }'
}

case " $PARTS " in *" runs "*)
	if [ -n "$CELLS" ]; then
		for seed in $SEEDS; do
			for c in $CELLS; do
				IFS=: read -r rule n cond <<<"$c"
				cell "$rule" "$n" "$cond" "$seed"
			done
		done
	else
		for seed in $SEEDS; do
			for n in $WORKERS; do
				for cond in $CONDS; do
					for rule in $RULES; do cell "$rule" "$n" "$cond" "$seed"; done
				done
			done
		done
	fi ;;
esac

case " $PARTS " in *" table "*)
	# runs.tsv: every row, with its times to the targets
	{
		printf 'rule\tworkers\tcondition\tseed\tstatus\ttest_bpb\ttest_acc\tbytes\tvtime\tupdates\tcpu_s'
		printf '\ttargets\tto_first\tto_second\n'
		for r in "$out"/rows/*; do
			[ -s "$r" ] || continue
			printf '%s%s\n' "$(cat "$r")" "$(to_targets "$out/runs/$(basename "$r")/log.jsonl" "$(cut -f2 "$r")")"
		done
		# PRIOR's rows of runs.tsv (measured before, without their runs here) for the cells and
		# seeds that have no row of their own
		if [ -n "$PRIOR" ]; then
			awk -F'\t' -v dir="$out/rows" '!/^#/ && NF >= 14 {
				f = dir "/" $1 "-n" $2 "-" $3 "-s" $4; sub(/\+/, "-", f)
				if ((getline x < f) <= 0) print; close(f) }' "$PRIOR"
		fi
	} >"$out/runs.tsv"
	# table.md: per cell (rule, workers, condition), over its seeds: the mean (± sd with more
	# than one) of the held-out bits per byte and of the times to the targets (seeds that
	# reached them; "-": none did), MB on the wire and CPU seconds (means)
	{
		printf '| workers | condition | rule | seeds | held-out bits per byte | targets | virtual s to the first | to the second | virtual s at the end | MB on the wire | CPU s |\n'
		echo "|---|---|---|---|---|---|---|---|---|---|---|"
		tail -n +2 "$out/runs.tsv" | sort -t"$(printf '\t')" -k2,2n -k3,3 -k4,4n -s | awk -F'\t' -v rules="$RULES" -v conds="$CONDS" '
			function ms(s, q, n) { return n > 1 ? sprintf("%.3f ± %.3f", s / n, sqrt(max0(q - s * s / n) / (n - 1))) : n ? sprintf("%.3f", s) : "-" }
			function mt(s, q, n, m) { return n ? sprintf("%.1f%s%s", s / n, n > 1 ? sprintf(" ± %.1f", sqrt(max0(q - s * s / n) / (n - 1))) : "",
				n < m ? " (" n " of " m ")" : "") : "-" }
			function max0(x) { return x > 0 ? x : 0 }
			BEGIN { nr = split(rules, ro, " "); for (i = 1; i <= nr; i++) rank[ro[i]] = i
				nc = split(conds, co, " "); for (i = 1; i <= nc; i++) crank[co[i]] = i }
			{ k = $2 "|" sprintf("%02d", crank[$3]) "|" sprintf("%02d", rank[$1]) "|" $3 "|" $1; if (!(k in runs)) key[++nk] = k; runs[k]++
			  seeds[k] = seeds[k] (seeds[k] == "" ? "" : ",") $4
			  if ($5 == "ok") { ok[k]++; b[k] += $6; b2[k] += $6 * $6 } else st[k] = $5
			  mb[k] += $8 / 1e6; cpu[k] += $11; vt[k] += $9
			  tg[k] = $12; sub(" ", " / ", tg[k])
			  if ($13 != "-") { t1[k] += $13; q1[k] += $13 * $13; n1[k]++ }
			  if ($14 != "-") { t2[k] += $14; q2[k] += $14 * $14; n2[k]++ } }
			END { for (i = 1; i <= nk; i++) { k = key[i]; split(k, f, "|")
				printf "%s\t| %s | %s | %s | %s | %s | %s | %s | %s | %.1f | %.1f | %.0f |\n", k, f[1], f[4], f[5], seeds[k],
					ok[k] ? ms(b[k], b2[k], ok[k]) (ok[k] < runs[k] ? " (" st[k] ")" : "") : st[k], tg[k],
					mt(t1[k], q1[k], n1[k], runs[k]), mt(t2[k], q2[k], n2[k], runs[k]), vt[k] / runs[k], mb[k] / runs[k],
					cpu[k] / runs[k] } }' | sort -t'|' -k1,1n -k2,2 -k3,3 | cut -f2-
	} >"$out/table.md"
	cat "$out/table.md" ;;
esac

case " $PARTS " in *" figures "*)
	# per workers and condition, seed 1 of every rule: the training loss in bits per byte against
	# virtual seconds and against bytes on the wire. gem-plot-data's loss view of each run, its
	# moving average over about WINDOW samples (the updates of a rule with a window carry H
	# steps each: one --smooth for all would flatten them), drawn together by gnuplot
	command -v gnuplot >/dev/null 2>&1 || { echo "lm-rules: gnuplot not found: no figures" >&2; exit 0; }
	mkdir -p "$FIGDIR" "$out/plot" || exit 1
	for n in $WORKERS; do
		for cond in $CONDS; do
			c=${cond/+/-}
			for x in seconds bytes; do
				plots=
				for rule in $RULES; do
					l=$out/runs/$rule-n$n-$c-s1/log.jsonl d=$out/plot/$rule-n$n-$c-s1-$x.tsv
					[ -s "$l" ] && [ -s "$out/rows/$rule-n$n-$c-s1" ] || continue
					k=$(sed -n '/"event"/d; s/.*"samples":\([0-9]*\).*/\1/p' "$l" |
						awk -v w="$WINDOW" '{ n++; s = $1 } END { k = n ? int(w * n / s + 0.5) : 1; print k < 1 ? 1 : k }')
					gem-plot-data -q --smooth "$k" loss --x "$x" "$l" >"$d" || continue
					plots="$plots${plots:+, }'$d' using 1:(\$4/log(2)) with lines lw 2 title '$rule'"
				done
				[ -n "$plots" ] || continue
				{
					echo "set terminal pngcairo size 1024,640 noenhanced"
					echo "set output '$FIGDIR/n$n-$c-$x.png'"
					echo "set key below; set grid"
					echo "set title '$(basename "$MODEL" .json) on $DATA, $n workers, $cond: training loss over the last $WINDOW windows'"
					echo "set ylabel 'training bits per byte'; set yrange [3:6]"
					if [ $x = bytes ]; then echo "set xlabel 'bytes on the wire'; set logscale x"
					else
						echo "set xlabel 'virtual seconds'"
						# on a slow link sync's seconds are 20 times the others'
						case $cond in bw*) echo "set logscale x" ;; esac
					fi
					echo "plot $plots"
				} | gnuplot || echo "lm-rules: n$n-$c-$x.png failed" >&2
			done
		done
	done ;;
esac
