#!/bin/bash
# t3104: the int8, int4 and topk codecs everywhere a message goes. gem-work and gem-run take
# them (and refuse bad names before anything starts), commits in each train a served run and
# SGP nodes to a sane loss, θ comes back whole in fp16 at a join; a commit written by another
# program from gem-protocol(7) alone is taken, hostile or unknown ones get a 4xx JSON error;
# easgd refuses topk; gem-sim models each codec bit for bit: one simulated worker, on one
# server or two slices, ends with the θ of gem-serve and gem-work --codec.
. "$(dirname "$0")/test-lib.sh"

init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 "$@"; }
msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 --value 0.001 "$@"; }
# blob FILE: the params file without its header line (which holds the wall-clock elapsed)
blob() { tail -n +2 "$1"; }
# theta RUN: θ as raw float32 (a sliced run's slices end to end)
theta() { python3 "$GEM_SRC/t/gem-theta.py" "$1"; }

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_code 2 'gem-work --codec topk wants its fraction' '
	gem-work --server http://127.0.0.1:1 --codec topk 2>err; rc=$?; cat err;
	grep -q "topk:F with 0 < F <= 1" err && exit $rc
'
test_expect_code 2 'gem-work --codec lists the new codecs' '
	gem-work --server http://127.0.0.1:1 --codec int16 2>err; rc=$?; cat err;
	grep -q "did you mean int8?); valid: raw, zlib, zlib+shuffle, fp16, int8, int4, topk:F" err &&
	exit $rc
'
test_expect_success 'gem-run checks --codec before it makes or starts anything' '
	{ gem-run -q -n 2 --codec topk:2 --model tiny.json --data data bad 2>err; test $? = 2; } &&
	cat err && grep -q "^gem-run: gem-work: --codec: .*topk:F is a number" err && grep -q "^usage: gem-run" err &&
	test ! -e bad
'

for c in int8 int4 topk:0.1; do
	test_expect_success "gem-run -n 2 --codec $c trains a served run to a sane loss" "
		gem-run -q -n 2 --codec $c --work-opt=--steps=60 --model tiny.json --data data \
			--lr 0.1 --batch 32 --seed 3 run-$c >$c.tsv &&
		cat $c.tsv && awk '!/^#/ { found = 1; ok = \$4 < 0.5 } END { exit !(found && ok) }' $c.tsv &&
		grep -q '\"codec\":\"$c\"' run-$c/log.jsonl
	"
	test_expect_success "four SGP nodes push in $c and train to a sane loss" "
		GEM_LOG=debug gem-run -q -n 4 --rule sgp --codec $c --work-opt=--steps=40 \
			--model tiny.json --data data --lr 0.1 --batch 32 --seed 3 sgp-$c >sgp-$c.tsv &&
		grep -q 'pushes in codec $c' sgp-$c/node-3.log &&
		awk '!/^#/ && \$1 == \"average\" { found = 1; ok = \$4 < 0.5 } END { exit !(found && ok) }' sgp-$c.tsv
	"
done

# --worker-timeout 0: the commits of the tests after this one come from worker 0, which on a
# loaded machine may be silent for longer than the default minute; the server writes its log
# out every 0.2 s, so the join event is waited for
test_expect_success 'a worker of int8, int4 or topk gets θ in fp16; raw and fp16 their own' '
	init srv && start_server srv --keep-running --worker-timeout 0 &&
	for c in int8 int4 topk:0.01 fp16 raw; do
		want=fp16 && { [ $c != raw ] || want=raw; } &&
		curl -sf -X POST -d "{\"codec\":\"$c\"}" "$URL/v1/join" | head -1 >head.json &&
		grep -q "\"codec\":\"$want\"" head.json || { cat head.json; return 1; }
	done &&
	wait_until "grep -q codec.:.topk:0.01 srv/log.jsonl" 5
'

test_expect_success 'commits written from gem-protocol(7) alone, in int8, int4 and topk, are taken' '
	for c in int8 int4 topk:0.1 topk:0.003; do
		msg --worker 0 --codec $c >m &&
		curl -sf -o reply.msg -X POST --data-binary @m "$URL/v1/commit" &&
		head -1 reply.msg | grep -q "\"applied\":true" || return 1
	done
'

test_expect_success 'hostile lossy commits get 400 bad_blob, an unknown codec 400 bad_message' '
	msg --worker 0 --codec int8 --bad-scale >m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "scale" reply.json &&
	msg --worker 0 --codec int4 --bad-scale >m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "scale" reply.json &&
	msg --worker 0 --codec topk:0.1 --bad-index >m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "beyond" reply.json &&
	msg --worker 0 --codec int8 >m && sed -i "1s/\"int8\"/\"int2\"/" m &&
	expect_error 400 bad_message -X POST --data-binary @m "$URL/v1/commit" &&
	msg --worker 0 --codec int8 >m && sed -i "1s/\"int8\"/\"topk:0.5\"/" m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" &&
	msg --worker 0 --codec int8 >m && sed -i "1s/\"int8\"/\"int4\"/" m &&
	expect_error 400 bad_blob -X POST --data-binary @m "$URL/v1/commit" && grep -q "int4 size" reply.json &&
	expect_error 400 bad_codec "$URL/v1/params?codec=topk"
'

test_expect_success 'easgd refuses topk (its commit is the worker'"'"'s whole x), takes int8' '
	init --rule easgd ea && start_server ea --keep-running &&
	{ gem-work -q --server "$URL" --steps 2 --codec topk:0.5 2>err; test $? = 1; } &&
	cat err && grep -q "whole x" err &&
	gem-work -q --server "$URL" --steps 4 --codec int8
'

# one worker: its commits are serialised, so a simulated run is the served one
for spec in "int8 0" "topk:0.1 0" "int4 2"; do
	set -- $spec
	where="gem-serve" && [ $2 = 0 ] || where="gem-serve --slice 0/2 and 1/2 (gem-sim --slices 2)"
	test_expect_success "gem-sim -n 1 --codec $1: the θ of $where and gem-work --codec $1" "
		init --rule gem served-$1-$2 && init --rule gem sim-$1-$2 &&
		if [ $2 = 0 ]; then
			start_server served-$1-$2 && gem-work -q --server \$URL --steps 12 --codec $1 &&
			wait_exit \$SERVER_PID
		else
			{ gem-serve --listen 127.0.0.1:0 --slice 0/2 served-$1-$2 >/dev/null 2>&1 & p0=\$!; } &&
			{ gem-serve --listen 127.0.0.1:0 --slice 1/2 served-$1-$2 >/dev/null 2>&1 & p1=\$!; } &&
			test_bg \$p0 && test_bg \$p1 &&
			gem-work -q --server served-$1-$2 --steps 12 --codec $1 --retry-for 20 &&
			wait_exit \$p0 && wait_exit \$p1
		fi &&
		gem-sim -q -n 1 --steps 12 --slices \$(( $2 > 0 ? $2 : 1 )) --codec $1 sim-$1-$2 >/dev/null &&
		theta served-$1-$2 >a.bin && theta sim-$1-$2 >b.bin && cmp a.bin b.bin &&
		init --rule gem raw-$1-$2 && gem-sim -q -n 1 --steps 12 raw-$1-$2 >/dev/null &&
		theta raw-$1-$2 >c.bin && ! cmp -s a.bin c.bin
	"
done

test_expect_code 2 'gem-sim --codec checks the name' '
	gem-sim -q -n 1 --steps 1 --codec int3 run-int8
'
test_done
