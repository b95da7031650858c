#!/bin/bash
# t3700: gem-sim --replay re-runs a real asynchronous run from its log and ends with the same θ,
# bit for bit: the simulator runs the server's core and the worker's step, and the codec of its
# messages (gem-work --codec, with its error feedback), gem's bfloat16 state and its window of
# inner steps; and its log counts the bytes on the wire the served run's did. The default cnn
# (dropout on) on Fashion-MNIST, real gem-serve and gem-work processes.
. "$(dirname "$0")/test-lib.sh"
test_have_dataset

# blob FILE: the params file without its header line (which holds the wall-clock elapsed)
blob() { tail -n +2 "$1"; }

# served RUN RULE N STEPS [gem-init options]: a real run of N workers of STEPS steps each
served() {
	_run=$1 _rule=$2 _n=$3 _steps=$4
	shift 4
	gem-init -q --rule "$_rule" --workers "$_n" --lr 0.02 --batch 32 --seed 3 "$@" "$_run" &&
	start_server "$_run" &&
	_pids= &&
	for _i in $(seq "$_n"); do
		gem-work -q --server "$URL" --steps "$_steps" ${CODEC:+--codec "$CODEC"} \
			2>>"$_run/work.err" &
		_pids="$_pids $!"
	done &&
	for _p in $_pids; do wait_exit $_p 120 || return 1; done &&
	wait_exit $SERVER_PID 30
}

# bytes LOG: the bytes on the wire its update lines and stop events count
bytes() {
	python3 -c "
import json, sys
print(sum(j.get('bytes_in', 0) + j.get('bytes_out', 0) for j in map(json.loads, open(sys.argv[1]))))" "$1"
}

# same_bytes RUN NEW: NEW's log counts the bytes of RUN's (the same messages, built by the same
# encoders and header makers; HTTP's own headers are counted in neither)
same_bytes() {
	bytes "$1/log.jsonl" >"$1.bytes" && bytes "$2/log.jsonl" >"$2.bytes" &&
	test "$(cat "$1.bytes")" -gt 0 && cmp "$1.bytes" "$2.bytes"
}

# same RUN NEW: NEW's θ is RUN's, bit for bit
same() {
	blob "$1/params.gem" >"$1.blob" && blob "$2/params.gem" >"$2.blob" && cmp "$1.blob" "$2.blob"
}

for spec in "gem 4 6" "downpour 3 6 --window 2" "dynsgd 3 6" "easgd 3 6 --window 2" \
	    "dcasgd 3 6" "sync 3 5" "diloco 3 6 --window 3 --outer-lr 0.5" \
	    "async-diloco 3 6 --window 2 --delayed-nesterov 3"; do
	set -- $spec
	rule=$1
	test_expect_success "replay of a served $rule run with cnn and $2 workers: the same θ and bytes" "
		served real-$rule $spec &&
		gem-sim -q --replay real-$rule/log.jsonl new-$rule >replay.tsv &&
		same real-$rule new-$rule && same_bytes real-$rule new-$rule &&
		awk 'NR==2 { exit !(\$4 == $2) }' replay.tsv
	"
done

for codec in int8 topk:0.1; do
	test_expect_success "replay of a served gem run whose workers commit in $codec: the same θ and bytes" "
		CODEC=$codec served real-$codec gem 3 6 &&
		test \$(grep -c '\"event\":\"join\".*\"codec\":\"$codec\"' real-$codec/log.jsonl) = 3 &&
		gem-sim -q --replay real-$codec/log.jsonl new-$codec >/dev/null &&
		same real-$codec new-$codec && same_bytes real-$codec new-$codec && ! cmp -s real-$codec.blob real-gem.blob
	"
done
test_expect_success 'async-diloco with dynamic local updates: a slowed worker is told a smaller H; replayed' '
	gem-init -q --rule async-diloco --workers 2 --window 4 --dynamic-local-updates --lr 0.02 \
		--batch 32 --seed 3 real-dyn &&
	grep -q "\"dynamic_local_updates\": true" real-dyn/run.json &&
	start_server real-dyn &&
	# the fast one first, for longer than the slow one needs; the run stops when the slow one is done
	{ gem-work -q --server "$URL" --steps 5000 2>>real-dyn/work.err & }
	fast=$! &&
	for i in $(seq 300); do grep -q "\"event\":\"join\"" real-dyn/log.jsonl && break; sleep 0.1; done &&
	gem-work -q --server "$URL" --steps 24 --slowdown 8 2>>real-dyn/work.err &&
	{ stop_server; wait_exit $fast 60; true; } &&
	# the slow worker is the one of fewer samples: its H went under 4 (n < 4 x 32)
	python3 -c "
import json
ups = [json.loads(l) for l in open(\"real-dyn/log.jsonl\") if \"event\" not in l]
by = {}
for u in ups: by.setdefault(u[\"worker\"], []).append(u[\"n\"])
slow = min(by, key=lambda w: sum(by[w]))
assert by[slow][0] == 128 and min(by[slow]) < 128, by
fast = [w for w in by if w != slow][0]
assert by[fast].count(128) > len(by[fast]) / 2, by" &&
	# (not the same bytes: a commit the stop refused counts in the served log only)
	gem-sim -q --replay real-dyn/log.jsonl new-dyn >/dev/null &&
	same real-dyn new-dyn
'

test_expect_success 'a run whose data is split: each worker holds its part alone, replayed by the whole set' '
	gem-init -q --rule gem --workers 3 --lr 0.02 --batch 32 --seed 3 real-part &&
	python3 -c "
import json, sys
p = sys.argv[1] + \"/run.json\"
j = json.load(open(p)); j[\"part_data\"] = True; json.dump(j, open(p, \"w\"), indent=2)" real-part &&
	start_server real-part &&
	for i in 1 2 3; do
		gem-work -q --server "$URL" --steps 6 2>>real-part/work.err & eval p$i=\$!
	done &&
	wait_exit $p1 120 && wait_exit $p2 120 && wait_exit $p3 120 && wait_exit $SERVER_PID 30 &&
	grep -q "\"part_data\": true" real-part/run.json &&
	gem-sim -q --replay real-part/log.jsonl new-part >/dev/null &&
	same real-part new-part && ! cmp -s real-part.blob real-gem.blob
'

test_expect_success 'the log without the codecs: the replay goes another way, and says so' '
	cp -r real-int8 nocodec && sed -i "s/,\"codec\":\"int8\"//" nocodec/log.jsonl &&
	! gem-sim -q --replay nocodec/log.jsonl new-nocodec >/dev/null 2>err &&
	grep "in the log: the replay went another way than the run" err
'

test_expect_success 'replay of a served gem --gem-ref pull run: the same θ (the rule code is shared)' '
	served real-pull gem 4 6 --gem-ref pull &&
	grep -q "\"gem_ref\": \"pull\"" real-pull/run.json &&
	gem-sim -q --replay real-pull/log.jsonl new-pull >/dev/null &&
	grep -q "\"gem_ref\": \"pull\"" new-pull/run.json &&
	same real-pull new-pull
'

test_expect_success 'replay of a served gem --window 10 run (momentum SGD inside): the same θ' '
	served real-window gem 3 20 --window 10 &&
	grep -q "\"window\": 10" real-window/run.json &&
	test $(grep -c "\"n\":320," real-window/log.jsonl) = 6 &&
	gem-sim -q --replay real-window/log.jsonl new-window >replay.tsv &&
	same real-window new-window && ! cmp -s real-window.blob real-gem.blob &&
	awk "NR == 2 { exit !(\$1 == 6) }" replay.tsv
'

test_expect_success 'replay of a served gem run with bfloat16 state: the same θ, not the f32 run'"'"'s' '
	served real-bf16 gem 4 6 --state-precision bf16 &&
	grep -q "\"state_precision\": \"bf16\"" real-bf16/run.json &&
	gem-sim -q --replay real-bf16/log.jsonl new-bf16 >/dev/null &&
	same real-bf16 new-bf16 && ! cmp -s real-bf16.blob real-gem.blob
'

test_expect_success 'the replayed log has the real one'"'"'s updates, in order' '
	grep -v "\"event\"" real-gem/log.jsonl | sed -E "s/.*\"version\":([0-9]+),\"worker\":([0-9]+),\"tau\":([0-9]+).*/\1 \2 \3/" >real.u &&
	grep -v "\"event\"" new-gem/log.jsonl | sed -E "s/.*\"version\":([0-9]+),\"worker\":([0-9]+),\"tau\":([0-9]+).*/\1 \2 \3/" >new.u &&
	test $(wc -l <real.u) = 24 && cmp real.u new.u
'

test_expect_success 'a replay that goes another way than the log says where' '
	cp -r real-gem bad &&
	sed -i "0,/\"n\":32/s//\"n\":40/" bad/log.jsonl &&
	{ gem-sim -q --replay bad/log.jsonl new-bad 2>err; test $? = 1; } &&
	grep -q "line [0-9]*: worker [0-9]* computed" err
'

test_expect_success 'dma is not replayed, and says so' '
	gem-init -q --rule dma --workers 2 dma &&
	printf "{\"event\":\"start\",\"time\":1,\"version\":0,\"rule\":\"dma\"}\n" >dma/log.jsonl &&
	{ gem-sim -q --replay dma/log.jsonl new-dma 2>err; test $? = 2; } &&
	grep -q "background" err
'

# per_update LOG: the update lines (no "event") of LOG, and the mean bytes a commit brought in
per_update() {
	python3 -c "
import json, sys
u = [j for j in map(json.loads, open(sys.argv[1])) if 'event' not in j]
print(len(u), sum(j.get('bytes_in', 0) for j in u) / len(u))" "$1"
}

test_expect_success 'diloco and async-diloco with fragments in gem-sim: replayed bit for bit' '
	gem-init -q --rule diloco --workers 3 --window 4 --fragments 2 --lr 0.02 --batch 32 \
		--seed 3 frag-d &&
	gem-sim -q -n 3 --steps 8 frag-d >/dev/null &&
	gem-sim -q --replay frag-d/log.jsonl new-frag-d >/dev/null &&
	same frag-d new-frag-d && same_bytes frag-d new-frag-d &&
	gem-init -q --rule async-diloco --workers 3 --window 4 --fragments 2 --mix 0.5 --lr 0.02 \
		--batch 32 --seed 3 frag-a &&
	gem-sim -q -n 3 --steps 8 frag-a >/dev/null &&
	gem-sim -q --replay frag-a/log.jsonl new-frag-a >/dev/null &&
	same frag-a new-frag-a && same_bytes frag-a new-frag-a
'
test_expect_success 'diloco with 2 fragments: twice the rounds, each commit half the bytes' '
	gem-init -q --rule diloco --workers 3 --window 4 --lr 0.02 --batch 32 --seed 3 frag-1 &&
	gem-sim -q -n 3 --steps 8 frag-1 >/dev/null &&
	per_update frag-d/log.jsonl >frag-d.per && per_update frag-1/log.jsonl >frag-1.per &&
	cat frag-d.per frag-1.per &&
	read -r nd bd <frag-d.per && read -r n1 b1 <frag-1.per &&
	test "$nd" = 4 && test "$n1" = 2 &&
	awk -v a="$bd" -v b="$b1" "BEGIN { r = a / b; exit !(r > 0.49 && r < 0.51) }"
'
# vtime RUN: the virtual time at the end of gem-sim's run RUN (its output in RUN.sim)
vtime() { awk 'NR == 2 { print $4 }' "$1.sim"; }

test_expect_success 'gem-sim --overlap: 0 is the run without it, bit for bit; 1 replays bit for bit' '
	for t in 0 1; do
		gem-init -q --rule diloco --workers 3 --window 4 --fragments 2 --mix 0.5 --overlap $t \
			--lr 0.02 --batch 32 --seed 3 ov-$t || return 1
	done &&
	gem-init -q --rule diloco --workers 3 --window 4 --fragments 2 --mix 0.5 --lr 0.02 \
		--batch 32 --seed 3 ov-none &&
	for r in ov-0 ov-1 ov-none; do
		gem-sim -q -n 3 --steps 8 --bandwidth 1e6 $r >$r.sim || return 1
	done &&
	same ov-none ov-0 && ! same ov-0 ov-1 &&
	gem-sim -q --replay ov-1/log.jsonl new-ov-1 >/dev/null &&
	same ov-1 new-ov-1 && same_bytes ov-1 new-ov-1 &&
	echo "$(vtime ov-0) $(vtime ov-1)" &&
	awk -v a="$(vtime ov-0)" -v b="$(vtime ov-1)" "BEGIN { exit !(b < a) }"
'
test_expect_success 'served diloco and async-diloco (α 0.5) with 2 fragments: replayed bit for bit' '
	served real-frag-d diloco 2 8 --window 4 --fragments 2 &&
	gem-sim -q --replay real-frag-d/log.jsonl new-real-frag-d >/dev/null &&
	same real-frag-d new-real-frag-d && same_bytes real-frag-d new-real-frag-d &&
	served real-frag-a async-diloco 2 8 --window 4 --fragments 2 --mix 0.5 &&
	gem-sim -q --replay real-frag-a/log.jsonl new-real-frag-a >/dev/null &&
	same real-frag-a new-real-frag-a && same_bytes real-frag-a new-real-frag-a
'
test_expect_success 'served with 2 fragments: every commit ends, each about half of θ in bytes' '
	per_update real-frag-a/log.jsonl >real-frag-a.per && read -r na ba <real-frag-a.per &&
	per_update frag-1/log.jsonl >frag-1.per && read -r n1 b1 <frag-1.per &&
	test "$na" = 8 && grep -q "every worker has finished" real-frag-a/log.jsonl &&
	awk -v a="$ba" -v b="$b1" "BEGIN { r = a / (b / 3); exit !(r > 0.49 && r < 0.51) }"
'
test_expect_success 'served diloco, 2 fragments, α 0.5, --overlap 1: replayed bit for bit, gem-sim'"'"'s run' '
	served real-ov diloco 2 8 --window 4 --fragments 2 --mix 0.5 --overlap 1 &&
	grep -q "\"overlap\": 1" real-ov/run.json &&
	gem-sim -q --replay real-ov/log.jsonl new-real-ov >/dev/null &&
	same real-ov new-real-ov && same_bytes real-ov new-real-ov &&
	# two workers: a round'"'"'s sum is the same in either order, so the run is gem-sim'"'"'s own
	for t in 0 1; do
		gem-init -q --rule diloco --workers 2 --window 4 --fragments 2 --mix 0.5 --overlap $t \
			--lr 0.02 --batch 32 --seed 3 sim-ov-$t &&
		gem-sim -q -n 2 --steps 8 sim-ov-$t >/dev/null || return 1
	done &&
	same real-ov sim-ov-1 && ! same real-ov sim-ov-0
'
test_expect_success 'the same when the reply is slow: the worker trains on to its T-th step and waits' '
	gem-init -q --rule diloco --workers 2 --window 4 --fragments 2 --mix 0.5 --overlap 1 \
		--lr 0.02 --batch 32 --seed 3 real-ov-slow &&
	start_server real-ov-slow &&
	{ GEM_LOG=debug gem-work --server "$URL" --steps 8 2>real-ov-slow/work1.err & } &&
	p1=$! && test_bg $p1 &&
	# alone, its first round cannot close: it takes its next T steps with the commit in flight
	wait_until "grep -q \"1 inner step taken with the commit in flight\" real-ov-slow/work1.err" 60 &&
	# and the server stopped a moment while the second worker comes and the rounds go on
	kill -STOP $SERVER_PID &&
	{ gem-work -q --server "$URL" --steps 8 2>real-ov-slow/work2.err & } &&
	p2=$! && test_bg $p2 &&
	# the second worker has come: connected, its request queued in the stopped server
	wait_connected $p2 ${URL##*:} &&
	kill -CONT $SERVER_PID &&
	wait_exit $p1 120 && wait_exit $p2 120 && wait_exit $SERVER_PID 30 &&
	test $(grep -vc "\"event\"" real-ov-slow/log.jsonl) = 4 &&
	same real-ov real-ov-slow &&
	gem-sim -q --replay real-ov-slow/log.jsonl new-real-ov-slow >/dev/null &&
	same real-ov-slow new-real-ov-slow && same_bytes real-ov-slow new-real-ov-slow
'
test_expect_success 'gem-sim -n 1 equals gem-serve with one gem-work (cnn, dropout)' '
	served one gem 1 12 &&
	gem-init -q --rule gem --lr 0.02 --batch 32 --seed 3 sim1 &&
	gem-sim -q -n 1 --steps 12 sim1 >/dev/null &&
	same one sim1
'
test_done
