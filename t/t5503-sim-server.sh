#!/bin/bash
# t5503: gem-sim's server model (--server-cost, --bandwidth): the server as a queue, off by
# default, deterministic, and its figures (utilisation, waits) as queueing says they must be.
. "$(dirname "$0")/test-lib.sh"

blob() { tail -n +2 "$1"; }
nowall() { sed -E 's/"(time|elapsed)":[0-9.e+-]+,?//g' "$1"; }
# col TSV NAME: the value of column NAME in gem-sim's summary TSV
col() { awk -F'\t' -v n="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == n || $i == "# " n) c = i; next }
	{ print $c }' "$1"; }
# sim DIR N [options]: N workers of 10 steps of 1 s ± 50%, the summary in DIR.tsv
sim() { d=$1 n=$2; shift 2; cp -r base "$d" && gem-sim -q -n "$n" --steps 10 --step-time const:1 \
	--jitter 0.5 "$@" "$d" >"$d.tsv"; }

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 5 base
'

test_expect_success 'a zero cost and no bandwidth limit: the run without them, bit for bit' '
	sim off 8 --server-time 0.01 --latency 0.02 &&
	sim zero 8 --server-time 0.01 --latency 0.02 --server-cost 0,0 --bandwidth 0 &&
	blob off/params.gem >off.blob && blob zero/params.gem >zero.blob && cmp off.blob zero.blob &&
	nowall off/log.jsonl >off.log && nowall zero/log.jsonl >zero.log && cmp off.log zero.log &&
	test "$(col off.tsv link_util)" = 0.0000 &&
	# the server time alone keeps the server busy: 80 commits of 0.01 s
	awk -v u="$(col off.tsv server_util)" -v t="$(col off.tsv vtime)" \
		"BEGIN { d = u * t - 0.8; exit !(d < 0.001 && d > -0.001) }"
'

test_expect_success 'the model on: the same options give the same log and parameters twice' '
	sim m1 8 --server-cost 1e-6,0.02 --bandwidth 1e5 --slices 2 &&
	sim m2 8 --server-cost 1e-6,0.02 --bandwidth 1e5 --slices 2 &&
	blob m1/params.gem >m1.blob && blob m2/params.gem >m2.blob && cmp m1.blob m2.blob &&
	for k in 0 1; do
		nowall m1/slice-$k-of-2/log.jsonl >m1.log && nowall m2/slice-$k-of-2/log.jsonl >m2.log &&
		cmp m1.log m2.log || return 1
	done &&
	cut -f1-10,12- m1.tsv >m1.cut && cut -f1-10,12- m2.tsv >m2.cut && cmp m1.cut m2.cut &&
	grep -q "\"bandwidth\":100000" m1/slice-0-of-2/log.jsonl &&
	# and it changes the timing: the same run without the model differs
	sim m0 8 --slices 2 && ! cmp -s m1.tsv m0.tsv
'

test_expect_success 'server utilisation rises with the number of workers' '
	for n in 2 8 32; do sim u$n $n --server-cost 0,0.02 || return 1; done &&
	awk -v a="$(col u2.tsv server_util)" -v b="$(col u8.tsv server_util)" \
		-v c="$(col u32.tsv server_util)" "BEGIN { exit !(a > 0 && a < b && b < c && c <= 1) }"
'

test_expect_success 'a queue forms when service time x commit rate > 1, not well below' '
	# 4 workers, a commit a second each, 0.05 s each: load 0.2; 40 workers: load 2
	sim q4 4 --server-cost 0,0.05 && sim q40 40 --server-cost 0,0.05 &&
	awk -v lo="$(col q4.tsv wait_mean)" -v hi="$(col q40.tsv wait_mean)" \
		-v u="$(col q40.tsv server_util)" -v r="$(col q40.tsv commits_per_s)" \
		"BEGIN { exit !(lo < 0.05 && hi > 0.5 && u > 0.9 && r <= 20.0001) }" &&
	test "$(col q40.tsv tau_p99)" -ge "$(col q40.tsv tau_p50)" &&
	test "$(col q40.tsv tau_max)" -ge "$(col q40.tsv tau_p99)"
'

test_expect_success 'a slow link: the link is busy, and bounds the commit rate' '
	# tiny.json: 1108 parameters, 4432 bytes raw each way; 44320 bytes/s: 0.1 s a message
	sim b 40 --bandwidth 44320 &&
	awk -v l="$(col b.tsv link_util)" -v r="$(col b.tsv commits_per_s)" \
		"BEGIN { exit !(l > 0.9 && r <= 10.0001) }" &&
	sim b8 40 --bandwidth 44320 --codec int8 &&
	awk -v a="$(col b.tsv commits_per_s)" -v b="$(col b8.tsv commits_per_s)" "BEGIN { exit !(b > 2 * a) }"
'

test_expect_code 2 'a bad --server-cost is refused' '
	gem-sim -q -n 2 --server-cost 1 base
'
test_done
