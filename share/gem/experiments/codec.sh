#!/bin/bash
# codec.sh: the blob codecs on loopback, cnn on Fashion-MNIST (gem-protocol(7), "Blob codecs").
# Three tables:
#   1. per codec (raw, fp16, int8, int4, topk:0.01, topk:0.1 by default): a gem-serve and one
#      gem-work --codec C of STEPS steps; bytes per commit and per reply (gem-work's summary),
#      the worker's CPU time to encode a commit (codec, error feedback, framing) and its ms per
#      commit (encode, round trip, decode of the reply), the server's decoding of a commit and
#      encoding of its reply (GET /v1/stats, commit_us, wall time), REPS repetitions;
#   2. accuracy against bytes on the wire: for each rule of RULES, codec of ACC_CODECS and seed,
#      WORKERS workers (default 4) of the same samples in all: one epoch each with 4, else
#      round(4 x EPOCH / 64 / WORKERS) batches each (EPOCH: the training set, default 60,000:
#      Fashion-MNIST's), lr 0.05, momentum 0.9, batch 64: final test loss and accuracy, the bytes
#      of every commit and reply, wall time. gem, diloco (H = WINDOW, default 50; the outer lr
#      and momentum at gem-init's defaults) and any served rule: a gem-serve and WORKERS
#      gem-work --codec C, or with SIM=1 gem-sim -n WORKERS --codec C (its bytes are the served
#      run's: the same encoders; deterministic, one core). sgp: gem-run -n WORKERS --rule sgp
#      --codec C, WORKERS nodes on disjoint parts, one epoch in all: the nodes' average, the
#      bytes of every node's pushes (no commits: "-"; gem-sim does not simulate sgp);
#   3. (PARTS=link, or table2) gem-sim's prediction of training on a slow link: gem, 4 workers
#      of one epoch, seed SEEDS' first, codecs LINK_CODECS (default "raw int8 int4 topk:0.1"),
#      the server's link at each of BANDWIDTHS bytes/s (default "12500000 1250000": 100 and 10
#      Mbit/s) and a step of STEP_TIME seconds (default 0.0026, a cnn batch of 64 on one core): the
#      virtual time at which the mean training loss of the last 100 updates first reaches each
#      of TARGETS (default "0.6 0.5 0.45"), and of the end, with the final test loss;
#   4. (PARTS=tbf, as root) the same runs for real: a gem-serve and 4 gem-work --codec C of one
#      epoch (gem-run) on hosts made of network namespaces whose links tc's tbf limits to each
#      of TBF_RATES Mbit/s (default "100 10"; linkruns.sh, nshosts.sh), codecs LINK_CODECS,
#      seed SEEDS' first: the training seconds at which the same training loss (the last 100
#      updates') first reaches each of TARGETS, and of the end, the final test loss and
#      accuracy, the bytes on the wire (the log's). A run at a rate of TBF_STOP (default "10")
#      stops once it has reached every target, and any run once its training seconds pass
#      TBF_LIMIT (default 1200): its test figures are then the θ's it stopped with.
#
# usage: bash codec.sh [OUTDIR]          (default build/experiment-codec)
#
# Writes OUTDIR/speed.tsv, OUTDIR/accuracy.tsv, OUTDIR/link.tsv, OUTDIR/tbf.tsv and
# OUTDIR/table.md.
# Restartable: a row whose result exists in OUTDIR/rows/ is skipped. Environment: MODEL
# (default cnn), STEPS (table 1, default 300), REPS (default 3), CODECS (table 1, default "raw
# fp16 int8 int4 topk:0.01 topk:0.1"), ACC_CODECS (table 2, default "raw int8 int4 topk:0.1"),
# SEEDS (table 2, default "1 2 3"), RULES (default gem), WORKERS, SIM, WINDOW, EPOCH, PARTS
# (default "speed accuracy"; also link, table2 and tbf), LINK_CODECS, BANDWIDTHS, STEP_TIME,
# TARGETS, TBF_RATES, TBF_STOP, TBF_LIMIT, DATA (default fashion-mnist; kjv for MODEL=gpt),
# INIT_OPTS (more gem-init options, e.g. "--optimizer adamw --lr 1e-3" for gpt), GEM_BIN
# where the gem programs are (default: PATH, then the source tree's bin/). Wall times are the
# machine's at the time: on a shared machine they are noisy.
# PARTS=table2 makes doc/results/codec.md's tables 2 and 3: table 2 with RULES="gem sgp diloco" served
# by 4 workers and gem simulated with 16 (WORKERS=16 SIM=1), then table 3.
set -u

out=${1:-build/experiment-codec}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-serve >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-serve" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
for p in gem-init gem-serve gem-work gem-run gem-sim gem-eval curl; do
	command -v $p >/dev/null 2>&1 || { echo "codec: $p not found (set GEM_BIN)" >&2; exit 1; }
done
MODEL=${MODEL:-cnn} DATA=${DATA:-fashion-mnist} INIT_OPTS=${INIT_OPTS:-} STEPS=${STEPS:-300} REPS=${REPS:-3} SEEDS=${SEEDS:-1 2 3} RULES=${RULES:-gem}
CODECS=${CODECS:-raw fp16 int8 int4 topk:0.01 topk:0.1} ACC_CODECS=${ACC_CODECS:-raw int8 int4 topk:0.1}
PARTS=${PARTS:-speed accuracy} WORKERS=${WORKERS:-4} SIM=${SIM:-0} WINDOW=${WINDOW:-50} EPOCH=${EPOCH:-60000}
LINK_CODECS=${LINK_CODECS:-raw int8 int4 topk:0.1} BANDWIDTHS=${BANDWIDTHS:-12500000 1250000}
STEP_TIME=${STEP_TIME:-0.0026} TARGETS=${TARGETS:-0.6 0.5 0.45}
TBF_RATES=${TBF_RATES:-100 10} TBF_STOP=${TBF_STOP:-10} TBF_LIMIT=${TBF_LIMIT:-1200}

# workers N SIM: table 2's runs from now on have N workers, served (SIM 0) or simulated (1), each
# of the same samples in all as 4 workers of one epoch each ($steps: gem-work's and gem-sim's)
workers() {
	WORKERS=$1 steps= how=served
	[ "$1" = 4 ] || steps="--steps $(awk -v e="$EPOCH" -v n="$1" 'BEGIN { printf "%.0f", 4 * e / 64 / n }')"
	[ "$2" = 1 ] && how=sim
}
workers "$WORKERS" "$SIM"
mkdir -p "$out/runs" "$out/rows" || exit 1
started=$(date +%s)

# summary FILE...: from gem-work summaries ("..., N commits, X ms and Y bytes each (C: S sent,
# R received, E us of CPU to encode)"), one line: commits, mean ms, sent and received bytes per
# commit and encode µs, weighted by commits; and the sums of sent + received and of sent
summary() {
	grep -h " commits, .* ms and .* bytes each" "$@" |
		sed -E 's/.* ([0-9]+) commits, ([0-9.]+) ms and [0-9]+ bytes each \(.*: ([0-9]+) sent, ([0-9]+) received, ([0-9]+) us of CPU to encode\).*/\1 \2 \3 \4 \5/' |
		awk '{ n += $1; ms += $1 * $2; s += $1 * $3; r += $1 * $4; e += $1 * $5 }
		     END { if (n) printf "%d %.3f %.0f %.0f %.1f %.0f %.0f\n", n, ms / n, s / n, r / n, e / n, s + r, s }'
}

# serve RUN: a gem-serve of RUN in the background ($spid), its URL in $url
serve() {
	gem-serve --listen 127.0.0.1:0 "$@" >/dev/null 2>"${!#}.serve.err" &
	spid=$!
	for ((i = 0; i < 200; i++)); do [ -s "${!#}/server.url" ] && break; sleep 0.05; done
	url=$(cat "${!#}/server.url" 2>/dev/null)
}

# speed CODEC REP: one gem-serve, one gem-work --codec CODEC --steps STEPS
speed() {
	local codec=$1 rep=$2 name run res sum us
	name=speed-$MODEL-$codec-r$rep res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	rm -rf "$run"
	gem-init -q --model "$MODEL" --data "$DATA" --lr 0.05 --seed "$rep" $INIT_OPTS "$run" || return 1
	serve --keep-running "$run"
	gem-work --server "$url" --codec "$codec" --steps "$STEPS" 2>"$run.work.err"
	us=$(curl -sf "$url/v1/stats" | python3 -c '
import json, sys; t = json.load(sys.stdin)["commit_us"]; print("%.1f %.1f" % (t["decode"], t["encode"]))')
	kill -TERM $spid && wait $spid
	sum=$(summary "$run.work.err")
	[ -n "$sum" ] && [ -n "$us" ] || { echo "codec: $name: no summary" >&2; cat "$run.work.err" >&2; return 1; }
	# model codec rep steps ms sent received worker_encode_us server_decode_us server_encode_us
	# (summary's 7 fields, then the server's 2)
	echo "$sum $us" | awk -v m="$MODEL" -v c="$codec" -v r="$rep" -v s="$STEPS" \
		'{ printf "%s\t%s\t%d\t%d\t%.2f\t%d\t%d\t%.1f\t%.1f\t%.1f\n", m, c, r, s, $2, $3, $4, $5, $8, $9 }' >"$res"
	echo "codec: $name: $(cut -f5-10 "$res" | tr '\t' ' ')" >&2
}

# accuracy RULE CODEC SEED: WORKERS workers, served (gem-serve and gem-work), simulated (SIM=1,
# gem-sim) or, for sgp, gem-run's nodes
accuracy() {
	local rule=$1 codec=$2 seed=$3 name run res t0 bytes="- -" pids=() opts=
	name=acc-$MODEL-$rule
	[ "$WORKERS" = 4 ] && [ $how = served ] || name=$name-n$WORKERS-$how
	name=$name-$codec-s$seed res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	[ "$rule" = sgp ] && [ $how = sim ] && { echo "codec: $name: gem-sim does not simulate sgp" >&2; return 1; }
	rm -rf "$run"
	echo "codec: $name: start $(date +%T)" >&2
	t0=$(date +%s.%N)
	[ "$rule" = diloco ] && opts="--window $WINDOW"
	if [ "$rule" = sgp ]; then
		gem-run -q -n "$WORKERS" --rule sgp --codec "$codec" --model "$MODEL" --data "$DATA" \
			--lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" "$run" >"$run.tsv" 2>"$run.err" ||
			{ echo "codec: $name: gem-run failed" >&2; tail -5 "$run.err" >&2; return 1; }
	elif [ $how = sim ]; then
		gem-sim -q -n "$WORKERS" $steps --codec "$codec" --model "$MODEL" --data "$DATA" --rule "$rule" \
			$opts --lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" "$run" >"$run.sim" 2>"$run.err" ||
			{ echo "codec: $name: gem-sim failed" >&2; tail -5 "$run.err" >&2; return 1; }
		# its columns bytes_in and bytes_out: the commits, and the replies and joins
		bytes=$(awk '/^#/ { for (i = 1; i <= NF; i++) c[$i] = i - 1; next }
			{ printf "%.0f %.0f\n", $c["bytes_in"] + $c["bytes_out"], $c["bytes_in"] }' "$run.sim")
		gem-eval "$run" >"$run.tsv" || return 1
	else
		gem-init -q --model "$MODEL" --data "$DATA" --rule "$rule" $opts --workers "$WORKERS" \
			--lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" "$run" || return 1
		serve "$run"
		for ((i = 0; i < WORKERS; i++)); do
			gem-work --server "$url" --codec "$codec" $steps 2>"$run.work$i.err" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || { echo "codec: $name: a worker failed" >&2; return 1; }; done
		wait $spid
		bytes=$(summary "$run".work*.err | cut -d' ' -f6,7)
		gem-eval "$run" >"$run.tsv" || return 1
	fi
	# gem: one row; sgp: the row of the nodes' average, its bytes all the nodes' pushes
	awk -v rule="$rule" -v c="$codec" -v s="$seed" -v b="${bytes% *}" -v bs="${bytes#* }" -v m="$MODEL" \
		-v n="$WORKERS" -v how=$how -v t="$(echo "$(date +%s.%N) - $t0" | bc)" '
		/^#/ { next } rule == "sgp" && $1 != "average" { next }
		rule == "sgp" { b = $7 }
		{ printf "%s\t%s\t%s\t%s\t%.4f\t%.4f\t%s\t%.0f\t%s\t%d\t%s\n", m, rule, c, s, $4, $5, b, t, bs, n, how }' \
		"$run.tsv" >"$res"
	echo "codec: $name: $(cut -f5-9 "$res" | tr '\t' ' ') ($(date +%T))" >&2
}

# link CODEC BPS: gem-sim, 4 workers of one epoch, the server's link at BPS bytes/s
link() {
	local codec=$1 bps=$2 seed=${SEEDS%% *} name run res
	name=link-$MODEL-$codec-b$bps-s$seed res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	rm -rf "$run"
	echo "codec: $name: start $(date +%T)" >&2
	gem-sim -q -n 4 --step-time "const:$STEP_TIME" --bandwidth "$bps" --codec "$codec" --model "$MODEL" \
		--data "$DATA" --rule gem --lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" "$run" \
		>"$run.sim" 2>"$run.err" || { echo "codec: $name: gem-sim failed" >&2; tail -5 "$run.err" >&2; return 1; }
	gem-eval "$run" >"$run.tsv" || return 1
	# the log's update lines: vtime and the minibatch loss; the first vtime at which the mean of
	# the last 100 losses is at or below each target ("-": never), then the end's vtime
	grep '"loss"' "$run/log.jsonl" | sed -E 's/.*"vtime":([0-9.e+-]+).*"loss":([0-9.e+-]+).*/\1 \2/' |
		awk -v targets="$TARGETS" -v m="$MODEL" -v c="$codec" -v b="$bps" -v s="$seed" \
			-v test="$(awk '!/^#/ { print $4 }' "$run.tsv")" '
		BEGIN { nt = split(targets, tg, " ") }
		{ k = NR % 100; sum += $2 - (NR > 100 ? last[k] : 0); last[k] = $2; end = $1
		  if (NR >= 100) for (i = 1; i <= nt; i++) if (!(i in at) && sum / 100 <= tg[i]) at[i] = $1 }
		END { printf "%s\t%s\t%s\t%s\t%.4f\t%.2f", m, c, b, s, test, end
		      for (i = 1; i <= nt; i++) printf "\t%s", i in at ? sprintf("%.2f", at[i]) : "-"
		      printf "\n" }' >"$res"
	echo "codec: $name: $(cut -f5- "$res" | tr '\t' ' ') ($(date +%T))" >&2
}

# tbf CODEC RATE: a served gem run, 4 workers of one epoch, on hosts whose links are at RATE
# Mbit/s (linkruns.sh), stopped at the targets at the rates of TBF_STOP; its row
tbf() {
	local codec=$1 rate=$2 seed=${SEEDS%% *} name res stop=0
	name=tbf-$MODEL-$codec-${rate}mbit-s$seed res=$out/rows/$name.tsv
	[ -s "$res" ] && return 0
	case " $TBF_STOP " in *" $rate "*) stop=1 ;; esac
	echo "codec: $name: start $(date +%T)" >&2
	lr_run "$out/runs/$name" "$rate" $stop --rule gem --codec "$codec" --model "$MODEL" --data "$DATA" \
		--epochs 1 --lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" | {
		printf '%s\t%s\t%s\t%s\t' "$MODEL" "$codec" "$rate" "$seed"
		cat
	} >"$res.tmp" && mv "$res.tmp" "$res"
	echo "codec: $name: $(cut -f5- "$res" | tr '\t' ' ') ($(date +%T); $(uptime | sed 's/.*load/load/'))" >&2
}

failed=0
case " $PARTS " in *" tbf "*)
	. "$here/linkruns.sh"
	LR_TARGETS=$TARGETS LR_WINDOW=6400 LR_LIMIT=$TBF_LIMIT
	lr_init codec
	for r in $TBF_RATES; do
		for c in $LINK_CODECS; do tbf "$c" "$r" || failed=1; done
	done ;;
esac
case " $PARTS " in *" speed "*)
	for ((r = 1; r <= REPS; r++)); do
		for c in $CODECS; do speed "$c" "$r" || failed=1; done
	done ;;
esac
case " $PARTS " in *" accuracy "*)
	for s in $SEEDS; do
		for rule in $RULES; do
			for c in $ACC_CODECS; do accuracy "$rule" "$c" "$s" || failed=1; done
		done
	done ;;
esac
case " $PARTS " in *" table2 "*)
	for s in $SEEDS; do
		workers 4 0
		for rule in gem sgp diloco; do
			for c in $ACC_CODECS; do accuracy "$rule" "$c" "$s" || failed=1; done
		done
		workers 16 1
		for c in $ACC_CODECS; do accuracy gem "$c" "$s" || failed=1; done
	done ;;
esac
case " $PARTS " in *" link "* | *" table2 "*)
	for b in $BANDWIDTHS; do
		for c in $LINK_CODECS; do link "$c" "$b" || failed=1; done
	done ;;
esac

{
	echo "# model	codec	rep	steps	ms_per_commit	commit_bytes	reply_bytes	worker_encode_us	server_decode_us	server_encode_us"
	for c in $CODECS; do cat "$out"/rows/speed-*-"$c"-r*.tsv 2>/dev/null; done
} >"$out/speed.tsv"
# the rows of every run in OUTDIR, by model, rule, workers, how and codec (the codecs in the
# order of their bytes); a row of an earlier version of this script has no columns 10 and 11
{
	echo "# model	rule	codec	seed	test_loss	test_acc	wire_bytes	wall_seconds	commit_bytes	workers	how"
	cat "$out"/rows/acc-*.tsv 2>/dev/null | awk -F'\t' -v OFS='\t' '
		BEGIN { split("raw zlib zlib+shuffle fp16 int8 int4 topk:0.1 topk:0.01", o, " "); for (i in o) r[o[i]] = i }
		{ if (NF < 11) { $10 = 4; $11 = "served" } print $1, $2, $10, $11, ($3 in r ? r[$3] : 99), $4, $0 }' |
		sort -t"$(printf '\t')" -k1,1 -k2,2 -k3,3n -k4,4 -k5,5n -k6,6n | cut -f7-
} >"$out/accuracy.tsv"
{
	echo "# model	codec	bandwidth	seed	test_loss	end_vtime	$(echo "$TARGETS" | sed 's/\([^ ]*\)/to_\1/g' | tr ' ' '\t')"
	for b in $BANDWIDTHS; do
		for c in $LINK_CODECS; do cat "$out"/rows/link-*-"$c"-b"$b"-s*.tsv 2>/dev/null; done
	done
} >"$out/link.tsv"
{
	echo "# model	codec	rate	seed	ended	test_loss	test_acc	wire_bytes	end_seconds	$(echo "$TARGETS" | sed 's/\([^ ]*\)/to_\1/g' | tr ' ' '\t')	last_loss	wall_seconds"
	for r in $TBF_RATES; do
		for c in $LINK_CODECS; do cat "$out"/rows/tbf-*-"$c"-"$r"mbit-s*.tsv 2>/dev/null; done
	done
} >"$out/tbf.tsv"
# mean ± sd (sample sd; one value alone) of columns of rows grouped by their first columns
msd='function ms(s, q, n, f,   m, v) { m = s / n; if (n < 2) return sprintf(f, m)
	v = (q - n * m * m) / (n - 1); return sprintf(f " ± %.2g", m, v > 0 ? sqrt(v) : 0) }'
{
	echo "# blob codecs on loopback, Fashion-MNIST"
	echo
	echo "| model | codec | runs | bytes per commit | bytes per reply | worker encode µs (CPU) | server decode µs | server reply encode µs | ms per commit |"
	echo "|---|---|---|---|---|---|---|---|---|"
	grep -v '^#' "$out/speed.tsv" | awk -F'\t' "$msd"'
		{ k = $1 " | " $2; if (!(k in n)) o[++no] = k; n[k]++
		  for (j = 5; j <= 10; j++) { s[k, j] += $j; q[k, j] += $j * $j } }
		END { for (i = 1; i <= no; i++) { k = o[i]
			printf "| %s | %d | %s | %s | %s | %s | %s | %s |\n", k, n[k],
				ms(s[k, 6], q[k, 6], n[k], "%.0f"), ms(s[k, 7], q[k, 7], n[k], "%.0f"),
				ms(s[k, 8], q[k, 8], n[k], "%.0f"), ms(s[k, 9], q[k, 9], n[k], "%.0f"),
				ms(s[k, 10], q[k, 10], n[k], "%.0f"), ms(s[k, 5], q[k, 5], n[k], "%.2f") } }'
	echo
	echo "| model | rule | workers | run | codec | seeds | test loss | test accuracy | MB on the wire | of which commits | wall s |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	grep -v '^#' "$out/accuracy.tsv" | awk -F'\t' "$msd"'
		{ k = $1 " | " $2 " | " $10 " | " $11 " | " $3; if (!(k in n)) o[++no] = k; n[k]++
		  for (j = 5; j <= 9; j++) { v = j == 7 || j == 9 ? $j / 1e6 : $j; s[k, j] += v; q[k, j] += v * v }
		  nb[k] += $7 != "-"; nc[k] += $9 != "-" }
		END { for (i = 1; i <= no; i++) { k = o[i]
			printf "| %s | %d | %s | %s | %s | %s | %s |\n", k, n[k], ms(s[k, 5], q[k, 5], n[k], "%.4f"),
				ms(s[k, 6], q[k, 6], n[k], "%.4f"),
				nb[k] == n[k] ? sprintf("%.1f", s[k, 7] / n[k]) : "-",
				nc[k] == n[k] ? sprintf("%.1f", s[k, 9] / n[k]) : "-",
				ms(s[k, 8], q[k, 8], n[k], "%.0f") } }'
	echo
	if grep -qv '^#' "$out/link.tsv"; then
		echo "| model | codec | link Mbit/s | seed | test loss | end (virtual s) |$(printf ' training loss %s (virtual s) |' $TARGETS)"
		echo "|---|---|---|---|---|---|$(printf -- '---|%.0s' $TARGETS)"
		grep -v '^#' "$out/link.tsv" | awk -F'\t' '{ $3 = $3 * 8 / 1e6; printf "|"; for (i = 1; i <= NF; i++) printf " %s |", $i; printf "\n" }'
		echo
	fi
	if grep -qv '^#' "$out/tbf.tsv"; then
		echo "| model | codec | link Mbit/s | seed | ended | test loss | test accuracy | MB on the wire | end (s) |$(printf ' training loss %s (s) |' $TARGETS)"
		echo "|---|---|---|---|---|---|---|---|---|$(printf -- '---|%.0s' $TARGETS)"
		grep -v '^#' "$out/tbf.tsv" | awk -F'\t' '{ $8 = sprintf("%.1f", $8 / 1e6); printf "|"
			for (i = 1; i < NF - 1; i++) printf " %s |", $i; printf "\n" }'
		echo
	fi
	echo "Table 1: a gem-serve and one gem-work --codec C of $STEPS steps. Bytes per commit and"
	echo "per reply: the messages' (header line included); worker encode: the CPU time of the"
	echo "commit's codec, error feedback and framing; server decode (the commit's decoding and"
	echo "checks) and reply encode (θ in the reply codec: for int8, int4 and topk a delta from the"
	echo "worker's copy of θ in its codec, θ whole in fp16 after a join; raw needs none): wall time (GET /v1/stats); ms per commit: the worker's encode, round trip and"
	echo "decode of the reply, wall time. Table 2: gem and diloco (H = $WINDOW): the row's workers,"
	echo "the same samples in all (one epoch each with 4), lr 0.05, momentum 0.9, batch 64, served"
	echo "(gem-serve and gem-work) or simulated (gem-sim: the same encoders, so the same bytes);"
	echo "sgp: gem-run's nodes on disjoint parts, one epoch in all, their average. MB on the wire:"
	echo "every commit and its reply (gem-work's summaries; gem-sim's count adds the joins' θ), or"
	echo "every push of sgp, 10^6 bytes, the"
	echo "mean over the seeds, and of them the commits. Table 3 (gem-sim's prediction, not a"
	echo "measurement): gem, 4 workers of one epoch, a step of $STEP_TIME virtual s, the server's link"
	echo "limited each way; the virtual time at which the mean training loss of the last 100"
	echo "updates first reaches each target (-: never), the end's, and the final test loss."
	echo "Table 4 (PARTS=tbf): the same runs served on tbf-limited links, in training seconds"
	echo "(the server's); ended: ok, targets (stopped at them) or cut (at $TBF_LIMIT s)."
} >"$out/table.md"
echo "codec: done in $(($(date +%s) - started)) s: $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
