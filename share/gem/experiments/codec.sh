#!/bin/bash
# codec.sh: the blob codecs on loopback, cnn on Fashion-MNIST (issue 14, "Codecs for slow
# links"). Two tables:
#   1. per codec (raw, zlib, zlib+shuffle, fp16): a gem-serve and one gem-work --codec C of
#      STEPS steps; ms per commit (the worker's encode, round trip and decode of the reply, as
#      gem-work's summary reports it) and bytes per commit (the commit's and the reply's
#      messages), REPS repetitions;
#   2. accuracy of fp16 against raw: gem-run -n 4 with rule gem, and with --rule sgp, one epoch
#      per worker (gem) or of the data between the nodes (sgp), lr 0.05, momentum 0.9, batch
#      64, for each seed: final test loss and accuracy (sgp: of the nodes' average), wall time.
#
# usage: bash codec.sh [OUTDIR]          (default build/experiment-codec)
#
# Writes OUTDIR/speed.tsv, OUTDIR/accuracy.tsv and OUTDIR/table.md. Restartable: a row whose
# result exists in OUTDIR/rows/ is skipped. Environment: STEPS (table 1, default 300), REPS
# (default 3), SEEDS (table 2, default "1 2 3"), RULES (default "gem sgp"), PARTS (default
# "speed accuracy"), GEM_BIN where the gem programs are (default: PATH, then the source tree's
# bin/). Wall times are the machine's at the time: on a shared machine they are noisy.
set -u

out=${1:-build/experiment-codec}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-serve >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-serve" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
for p in gem-init gem-serve gem-work gem-run gem-eval; do
	command -v $p >/dev/null 2>&1 || { echo "codec: $p not found (set GEM_BIN)" >&2; exit 1; }
done
STEPS=${STEPS:-300} REPS=${REPS:-3} SEEDS=${SEEDS:-1 2 3} RULES=${RULES:-gem sgp}
PARTS=${PARTS:-speed accuracy}
mkdir -p "$out/runs" "$out/rows" || exit 1
started=$(date +%s)

# speed CODEC REP: one gem-serve, one gem-work --codec CODEC --steps STEPS
speed() {
	local codec=$1 rep=$2 name run res line
	name=speed-$codec-r$rep res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	rm -rf "$run"
	gem-init -q --model cnn --data fashion-mnist --lr 0.05 --seed "$rep" "$run" || return 1
	gem-serve --listen 127.0.0.1:0 "$run" >/dev/null 2>"$run.serve.err" &
	local spid=$!
	# --server RUNDIR: waits for the server's URL to appear there
	gem-work --server "$run" --codec "$codec" --steps "$STEPS" 2>"$run.work.err"
	wait $spid
	# gem-work: worker 0: S steps, ... commits X ms and Y bytes each (CODEC)
	line=$(grep "commits .* ms and .* bytes each" "$run.work.err" | tail -1)
	[ -n "$line" ] || { echo "codec: $name: no summary" >&2; cat "$run.work.err" >&2; return 1; }
	echo "$line" | sed -E 's/.* in ([0-9.]+) s,.*commits ([0-9.]+) ms and ([0-9]+) bytes each.*/\1 \2 \3/' |
		awk -v c="$codec" -v r="$rep" -v s="$STEPS" \
			'{ printf "%s\t%d\t%d\t%.2f\t%d\t%.1f\n", c, r, s, $2, $3, $1 }' >"$res"
	echo "codec: $name: $(cut -f4-6 "$res" | tr '\t' ' ')" >&2
}

# accuracy RULE CODEC SEED: gem-run -n 4
accuracy() {
	local rule=$1 codec=$2 seed=$3 name run res t0 sgp=()
	name=acc-$rule-$codec-s$seed res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	rm -rf "$run"
	[ "$rule" = sgp ] && sgp=(--rule sgp)
	echo "codec: $name: start $(date +%T)" >&2
	t0=$(date +%s.%N)
	gem-run -q -n 4 "${sgp[@]}" --codec "$codec" --model cnn --data fashion-mnist --lr 0.05 \
		--momentum 0.9 --batch 64 --seed "$seed" "$run" >"$run.tsv" 2>"$run.err" ||
		{ echo "codec: $name: gem-run failed" >&2; tail -5 "$run.err" >&2; return 1; }
	# gem: one row; sgp: the row of the nodes' average
	awk -v rule="$rule" -v c="$codec" -v s="$seed" -v t="$(echo "$(date +%s.%N) - $t0" | bc)" '
		/^#/ { next } rule == "sgp" && $1 != "average" { next }
		{ printf "%s\t%s\t%s\t%.4f\t%.4f\t%.0f\n", rule, c, s, $4, $5, t }' "$run.tsv" >"$res"
	echo "codec: $name: $(cut -f4-6 "$res" | tr '\t' ' ') ($(date +%T))" >&2
}

failed=0
case " $PARTS " in *" speed "*)
	for ((r = 1; r <= REPS; r++)); do
		for c in raw zlib zlib+shuffle fp16; do speed "$c" "$r" || failed=1; done
	done ;;
esac
case " $PARTS " in *" accuracy "*)
	for s in $SEEDS; do
		for rule in $RULES; do
			for c in raw fp16; do accuracy "$rule" "$c" "$s" || failed=1; done
		done
	done ;;
esac

{
	echo "# codec	rep	steps	ms_per_commit	bytes_per_commit	worker_seconds"
	cat "$out"/rows/speed-*.tsv 2>/dev/null
} >"$out/speed.tsv"
{
	echo "# rule	codec	seed	test_loss	test_acc	wall_seconds"
	cat "$out"/rows/acc-*.tsv 2>/dev/null | sort -k1,1 -k2,2r -k3,3n
} >"$out/accuracy.tsv"
# mean ± sd (sample sd; one value alone) of columns of rows grouped by their first columns
msd='function ms(s, q, n,   m, v) { m = s / n; if (n < 2) return sprintf("%.4g", m)
	v = (q - n * m * m) / (n - 1); return sprintf("%.4g ± %.2g", m, v > 0 ? sqrt(v) : 0) }'
{
	echo "# blob codecs, cnn on Fashion-MNIST, loopback"
	echo
	echo "| codec | runs | ms per commit | bytes per commit |"
	echo "|---|---|---|---|"
	grep -v '^#' "$out/speed.tsv" | awk -F'\t' "$msd"'
		{ k = $1; if (!(k in n)) o[++no] = k; n[k]++
		  s4[k] += $4; q4[k] += $4 * $4; s5[k] += $5; q5[k] += $5 * $5 }
		END { for (i = 1; i <= no; i++) { k = o[i]
			printf "| %s | %d | %s | %s |\n", k, n[k], ms(s4[k], q4[k], n[k]), ms(s5[k], q5[k], n[k]) } }'
	echo
	echo "| rule | codec | seeds | test loss | test accuracy | wall s |"
	echo "|---|---|---|---|---|---|"
	grep -v '^#' "$out/accuracy.tsv" | awk -F'\t' "$msd"'
		{ k = $1 " | " $2; if (!(k in n)) o[++no] = k; n[k]++
		  s4[k] += $4; q4[k] += $4 * $4; s5[k] += $5; q5[k] += $5 * $5; s6[k] += $6; q6[k] += $6 * $6 }
		END { for (i = 1; i <= no; i++) { k = o[i]
			printf "| %s | %d | %s | %s | %s |\n", k, n[k], ms(s4[k], q4[k], n[k]),
				ms(s5[k], q5[k], n[k]), ms(s6[k], q6[k], n[k]) } }'
	echo
	echo "ms per commit: the worker's encode, round trip and decode of the reply (gem-work's"
	echo "summary); bytes per commit: the commit's and the reply's messages. gem: gem-run -n 4,"
	echo "one epoch per worker; sgp: gem-run -n 4 --rule sgp, the nodes' average."
} >"$out/table.md"
echo "codec: done in $(($(date +%s) - started)) s: $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
