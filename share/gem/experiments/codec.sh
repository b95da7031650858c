#!/bin/bash
# codec.sh: the blob codecs on loopback, cnn on Fashion-MNIST (gem-protocol(7), "Blob codecs").
# Two tables:
#   1. per codec (raw, fp16, int8, int4, topk:0.01, topk:0.1 by default): a gem-serve and one
#      gem-work --codec C of STEPS steps; bytes per commit and per reply (gem-work's summary),
#      the worker's CPU time to encode a commit (codec, error feedback, framing) and its ms per
#      commit (encode, round trip, decode of the reply), the server's decoding of a commit and
#      encoding of its reply (GET /v1/stats, commit_us, wall time), REPS repetitions;
#   2. accuracy against bytes on the wire: a gem-serve and 4 gem-work --codec C (rule gem, one
#      epoch per worker, lr 0.05, momentum 0.9, batch 64) for each seed: final test loss and
#      accuracy, the bytes of every commit and reply, wall time. With RULES containing sgp,
#      also gem-run -n 4 --rule sgp --codec C (the nodes' average; bytes not counted: "-").
#
# usage: bash codec.sh [OUTDIR]          (default build/experiment-codec)
#
# Writes OUTDIR/speed.tsv, OUTDIR/accuracy.tsv and OUTDIR/table.md. Restartable: a row whose
# result exists in OUTDIR/rows/ is skipped. Environment: MODEL (default cnn), STEPS (table 1,
# default 300), REPS (default 3), CODECS (table 1, default "raw fp16 int8 int4 topk:0.01
# topk:0.1"), ACC_CODECS (table 2, default "raw int8 int4 topk:0.1"), SEEDS (table 2, default
# "1 2 3"), RULES (default gem), PARTS (default "speed accuracy"), DATA (default fashion-mnist;
# kjv for MODEL=gpt), INIT_OPTS (more gem-init options, e.g. "--optimizer adamw --lr 1e-3" for
# gpt), GEM_BIN where the gem programs are (default: PATH, then the source tree's bin/). Wall
# times are the machine's at the time: on a shared machine they are noisy.
set -u

out=${1:-build/experiment-codec}
here=$(cd "$(dirname "$0")" && pwd)
if [ -n "${GEM_BIN:-}" ]; then
	PATH="$GEM_BIN:$PATH"
elif ! command -v gem-serve >/dev/null 2>&1 && [ -x "$here/../../../bin/gem-serve" ]; then
	PATH="$(cd "$here/../../../bin" && pwd):$PATH"
fi
for p in gem-init gem-serve gem-work gem-run gem-eval curl; do
	command -v $p >/dev/null 2>&1 || { echo "codec: $p not found (set GEM_BIN)" >&2; exit 1; }
done
MODEL=${MODEL:-cnn} DATA=${DATA:-fashion-mnist} INIT_OPTS=${INIT_OPTS:-} STEPS=${STEPS:-300} REPS=${REPS:-3} SEEDS=${SEEDS:-1 2 3} RULES=${RULES:-gem}
CODECS=${CODECS:-raw fp16 int8 int4 topk:0.01 topk:0.1} ACC_CODECS=${ACC_CODECS:-raw int8 int4 topk:0.1}
PARTS=${PARTS:-speed accuracy}
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

# accuracy RULE CODEC SEED: 4 workers of one epoch each (gem), or gem-run -n 4 --rule sgp
accuracy() {
	local rule=$1 codec=$2 seed=$3 name run res t0 bytes="- -" pids=()
	name=acc-$MODEL-$rule-$codec-s$seed res=$out/rows/$name.tsv run=$out/runs/$name
	[ -s "$res" ] && return 0
	rm -rf "$run"
	echo "codec: $name: start $(date +%T)" >&2
	t0=$(date +%s.%N)
	if [ "$rule" = sgp ]; then
		gem-run -q -n 4 --rule sgp --codec "$codec" --model "$MODEL" --data "$DATA" \
			--lr 0.05 --momentum 0.9 --batch 64 --seed "$seed" "$run" >"$run.tsv" 2>"$run.err" ||
			{ echo "codec: $name: gem-run failed" >&2; tail -5 "$run.err" >&2; return 1; }
	else
		gem-init -q --model "$MODEL" --data "$DATA" --rule "$rule" --workers 4 --lr 0.05 \
			--momentum 0.9 --batch 64 --seed "$seed" "$run" || return 1
		serve "$run"
		for i in 0 1 2 3; do
			gem-work --server "$url" --codec "$codec" 2>"$run.work$i.err" &
			pids+=($!)
		done
		for p in "${pids[@]}"; do wait "$p" || { echo "codec: $name: a worker failed" >&2; return 1; }; done
		wait $spid
		bytes=$(summary "$run".work?.err | cut -d' ' -f6,7)
		gem-eval "$run" >"$run.tsv" || return 1
	fi
	# gem: one row; sgp: the row of the nodes' average
	awk -v rule="$rule" -v c="$codec" -v s="$seed" -v b="${bytes% *}" -v bs="${bytes#* }" -v m="$MODEL" \
		-v t="$(echo "$(date +%s.%N) - $t0" | bc)" '
		/^#/ { next } rule == "sgp" && $1 != "average" { next }
		{ printf "%s\t%s\t%s\t%s\t%.4f\t%.4f\t%s\t%.0f\t%s\n", m, rule, c, s, $4, $5, b, t, bs }' "$run.tsv" >"$res"
	echo "codec: $name: $(cut -f5-9 "$res" | tr '\t' ' ') ($(date +%T))" >&2
}

failed=0
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

{
	echo "# model	codec	rep	steps	ms_per_commit	commit_bytes	reply_bytes	worker_encode_us	server_decode_us	server_encode_us"
	for c in $CODECS; do cat "$out"/rows/speed-*-"$c"-r*.tsv 2>/dev/null; done
} >"$out/speed.tsv"
{
	echo "# model	rule	codec	seed	test_loss	test_acc	wire_bytes	wall_seconds	commit_bytes"
	for c in $ACC_CODECS; do cat "$out"/rows/acc-*-"$c"-s*.tsv 2>/dev/null; done |
		sort -s -k1,1 -k2,2
} >"$out/accuracy.tsv"
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
	echo "| model | rule | codec | seeds | test loss | test accuracy | MB on the wire | of which commits | wall s |"
	echo "|---|---|---|---|---|---|---|---|---|"
	grep -v '^#' "$out/accuracy.tsv" | awk -F'\t' "$msd"'
		{ k = $1 " | " $2 " | " $3; if (!(k in n)) o[++no] = k; n[k]++
		  for (j = 5; j <= 9; j++) { v = j == 7 || j == 9 ? $j / 1e6 : $j; s[k, j] += v; q[k, j] += v * v }
		  nb[k] += $7 != "-" }
		END { for (i = 1; i <= no; i++) { k = o[i]
			printf "| %s | %d | %s | %s | %s | %s | %s |\n", k, n[k], ms(s[k, 5], q[k, 5], n[k], "%.4f"),
				ms(s[k, 6], q[k, 6], n[k], "%.4f"),
				nb[k] == n[k] ? sprintf("%.0f", s[k, 7] / n[k]) : "-",
				nb[k] == n[k] ? sprintf("%.0f", s[k, 9] / n[k]) : "-",
				ms(s[k, 8], q[k, 8], n[k], "%.0f") } }'
	echo
	echo "Table 1: a gem-serve and one gem-work --codec C of $STEPS steps. Bytes per commit and"
	echo "per reply: the messages' (header line included); worker encode: the CPU time of the"
	echo "commit's codec, error feedback and framing; server decode (the commit's decoding and"
	echo "checks) and reply encode (θ in the reply codec: for int8, int4 and topk a delta from the"
	echo "worker's copy of θ in its codec, θ whole in fp16 after a join; raw needs none): wall time (GET /v1/stats); ms per commit: the worker's encode, round trip and"
	echo "decode of the reply, wall time. Table 2: 4"
	echo "workers of one epoch each, gem, lr 0.05, momentum 0.9, batch 64; MB on the wire: every"
	echo "commit and reply of the run (10^6 bytes, the mean over the seeds), and of them the commits."
} >"$out/table.md"
echo "codec: done in $(($(date +%s) - started)) s: $out/table.md" >&2
cat "$out/table.md"
[ $failed = 0 ]
