#!/bin/bash
# t5500: gem-sim simulates asynchronous workers deterministically, as gem-serve would serve them.
. "$(dirname "$0")/test-lib.sh"

# blob FILE: the params file without its header line (which holds the wall-clock elapsed)
blob() { tail -n +2 "$1"; }
# nowall LOG: the log without the wall-clock fields
nowall() { sed -E 's/"(time|elapsed)":[0-9.e+-]+,?//g' "$1"; }
init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 5 "$@"; }
# bytes RUN: the bytes on the wire its log counts (update lines and stop events)
bytes() {
	python3 -c "
import json, sys
print(sum(j.get('bytes_in', 0) + j.get('bytes_out', 0) for j in map(json.loads, open(sys.argv[1]))))" "$1/log.jsonl"
}
# same_bytes RUN SIM: the simulated run's log counts the served run's bytes (its messages built
# by the same encoders and header makers; HTTP's own headers are counted in neither)
same_bytes() {
	bytes "$1" >"$1.bytes" && bytes "$2" >"$2.bytes" && test "$(cat "$1.bytes")" -gt 0 &&
	cmp "$1.bytes" "$2.bytes"
}

test_expect_success 'setup' '
	make_tiny_data data &&
	init base && init --workers 2 --rule sync sync-base &&
	init --rule downpour --window 2 dp-base && init --rule easgd --window 2 --workers 3 ea-base
'

test_expect_success 'the same options give the same log and parameters, bit for bit' '
	cp -r base a && cp -r base b &&
	opts="-n 4 --step-time lognormal:0,0.3 --jitter 0.1 --stragglers 1:3 --latency 0.05 --server-time 0.01 --die 2@30 --join 12" &&
	gem-sim -q $opts a >a.tsv && gem-sim -q $opts b >b.tsv &&
	blob a/params.gem >a.blob && blob b/params.gem >b.blob && cmp a.blob b.blob &&
	nowall a/log.jsonl >a.log && nowall b/log.jsonl >b.log && cmp a.log b.log &&
	test $(grep -c "\"version\"" a.log) -gt 200 &&
	cut -f1-10 a.tsv >a.cut && cut -f1-10 b.tsv >b.cut && cmp a.cut b.cut
'

test_expect_success '--timing measured: worker speeds differ, bit for bit the same twice' '
	cp -r base ma && cp -r base mb && cp -r base mc &&
	gem-sim -q -n 4 --steps 30 --timing measured ma >/dev/null &&
	gem-sim -q -n 4 --steps 30 --step-time lognormal:0,0.55 --speed-spread 0.04 mb >/dev/null &&
	gem-sim -q -n 4 --steps 30 --step-time lognormal:0,0.55 mc >/dev/null &&
	blob ma/params.gem >ma.blob && blob mb/params.gem >mb.blob && blob mc/params.gem >mc.blob &&
	cmp ma.blob mb.blob && ! cmp -s ma.blob mc.blob &&
	grep -q "\"speed_spread\":0.04" ma/log.jsonl &&
	# arrivals are not in turn: some worker commits twice in a row
	sed -n "s/.*\"worker\":\([0-9]*\),\"tau\".*/\1/p" ma/log.jsonl | uniq -d | grep -q .
'

test_expect_success '--threads 2 gives the same result as one thread' '
	cp -r base t2 &&
	gem-sim -q $opts --threads 2 t2 >t2.tsv &&
	blob t2/params.gem >t2.blob && cmp a.blob t2.blob &&
	nowall t2/log.jsonl >t2.log && cmp a.log t2.log
'

test_expect_success '--threads 2 with many workers: the same as one thread' '
	cp -r base m1 && cp -r base m2 &&
	gem-sim -q -n 12 --steps 15 --step-time normal:1,0.2 m1 >/dev/null &&
	gem-sim -q -n 12 --steps 15 --step-time normal:1,0.2 -j 2 m2 >/dev/null &&
	blob m1/params.gem >m1.blob && blob m2/params.gem >m2.blob && cmp m1.blob m2.blob
'

test_expect_success 'one simulated worker equals gem-serve with one gem-work (same parameters and bytes)' '
	cp -r base real && cp -r base sim &&
	start_server real &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 40 &&
	wait $SERVER_PID &&
	gem-sim -q -n 1 --steps 40 sim >/dev/null &&
	blob real/params.gem >real.blob && blob sim/params.gem >sim.blob && cmp real.blob sim.blob &&
	grep -q "\"version\":40" sim/params.gem && same_bytes real sim
'

test_expect_success 'sync with 2 simulated workers equals gem-serve with 2 workers (and its bytes)' '
	cp -r sync-base sreal && cp -r sync-base ssim &&
	start_server sreal &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-work -q --server "$URL" --steps 15 & }
	w1=$! &&
	gem-work -q --server "$URL" --steps 15 &&
	wait $w1 && wait $SERVER_PID &&
	gem-sim -q -n 2 --steps 15 ssim >/dev/null &&
	blob sreal/params.gem >sreal.blob && blob ssim/params.gem >ssim.blob && cmp sreal.blob ssim.blob &&
	same_bytes sreal ssim
'

test_expect_success 'diloco with 2 simulated workers equals gem-serve with 2 workers (and its bytes)' '
	init --workers 2 --rule diloco --window 3 dreal && cp -r dreal dsim &&
	start_server dreal &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-work -q --server "$URL" --steps 15 & }
	w1=$! &&
	gem-work -q --server "$URL" --steps 15 &&
	wait $w1 && wait $SERVER_PID &&
	gem-sim -q -n 2 --steps 15 dsim >/dev/null &&
	grep -q "\"version\":5" dsim/params.gem &&
	blob dreal/params.gem >dreal.blob && blob dsim/params.gem >dsim.blob && cmp dreal.blob dsim.blob &&
	same_bytes dreal dsim
'

test_expect_success 'const step times: round-robin, every commit of staleness N-1' '
	cp -r base rr && gem-sim -q -n 5 --steps 30 rr >rr.tsv &&
	python3 -c "
import json
ups=[json.loads(l) for l in open(\"rr/log.jsonl\") if \"event\" not in l]
assert len(ups)==150, len(ups)
assert [u[\"worker\"] for u in ups[:10]]==[0,1,2,3,4]*2
assert all(u[\"tau\"]==4 for u in ups[5:]), set(u[\"tau\"] for u in ups)
assert all(u[\"vtime\"]==1+i//5 for i,u in enumerate(ups))
"
'

test_expect_success 'stragglers: the slow worker'"'"'s commits are staler' '
	cp -r base st && gem-sim -q -n 4 --steps 20 --stragglers 1:4 st >/dev/null &&
	gem-plot-data workers st >workers.tsv && cat workers.tsv &&
	awk "!/^#/ && NF { tau[\$1] = \$4; max[\$1] = \$5; n[\$1] = \$2 }
	     END { exit !(max[0] >= 3 * max[1] && max[0] >= 3 * max[2] && tau[0] > tau[3] &&
			  n[0] == 20 && n[1] == 20) }" workers.tsv
'

test_expect_success 'a straggler under async-diloco with dynamic local updates: the same θ twice' '
	init --rule async-diloco --window 4 --outer-lr 0.25 --delayed-nesterov 4 \
		--dynamic-local-updates ad-base &&
	cp -r ad-base ad1 && cp -r ad-base ad2 &&
	gem-sim -q -n 4 --steps 40 --stragglers 1:4 ad1 >/dev/null &&
	gem-sim -q -n 4 --steps 40 --stragglers 1:4 ad2 >/dev/null &&
	blob ad1/params.gem >ad1.blob && blob ad2/params.gem >ad2.blob && cmp ad1.blob ad2.blob &&
	nowall ad1/log.jsonl >ad1.log && nowall ad2/log.jsonl >ad2.log && cmp ad1.log ad2.log &&
	# the straggler was told a window of its own, smaller than that of the fast ones
	grep -q "\"worker\":0,.*\"n\":32," ad1.log && ! grep -q "\"worker\":1,.*\"n\":32," ad1.log
'

test_expect_success '--die: the worker leaves, the others finish' '
	cp -r base die && gem-sim -q -n 3 --steps 20 --die 1@5.5 die >/dev/null &&
	grep -q "\"event\":\"leave\",.*\"worker\":1,.*\"done\":false" die/log.jsonl &&
	test $(grep -c "\"done\":true" die/log.jsonl) = 2 &&
	test $(grep -v event die/log.jsonl | grep -c "\"worker\":1,") = 5 &&
	grep -q "\"version\":45" die/params.gem
'

test_expect_success '--join: a new worker joins later and trains its budget' '
	cp -r base join && gem-sim -q -n 2 --steps 10 --join 4.5 join >/dev/null &&
	grep -q "\"event\":\"join\",.*\"vtime\":4.5.*\"worker\":2" join/log.jsonl &&
	test $(grep -v event join/log.jsonl | grep -c "\"worker\":2,") = 10
'

test_expect_success 'every rule trains the tiny task in the simulator' '
	(
	for r in base dp-base ea-base sync-base; do
		cp -r $r rule-$r &&
		n=3 && { [ $r = sync-base ] && n=2 || :; } &&
		gem-sim -q -n $n --jitter 0.2 rule-$r >/dev/null &&
		gem-eval rule-$r >eval.tsv && cat eval.tsv &&
		awk "NR==2 { exit !(\$5 > 0.85) }" eval.tsv || exit 1
	done
	)
'

test_expect_success 'gem-eval and gem-plot-data read a simulated run, and its bytes' '
	gem-eval a >eval.tsv && awk "NR==2 { exit !(\$2 > 0) }" eval.tsv &&
	bytes a >want && awk -F"\t" "NR==2 { print \$6 }" eval.tsv >got && cmp want got &&
	awk -F"\t" "NR==2 { print \$20 + \$21 }" a.tsv >got && cmp want got &&
	gem-plot-data loss a >loss.tsv && test $(grep -vc "^#" loss.tsv) -gt 100 &&
	gem-plot-data pi a >pi.tsv && gem-plot-data staleness a >tau.tsv &&
	gem-plot-data throughput a >thr.tsv && test -s thr.tsv
'

test_expect_success 'gem-init options make the run first (with --workers N)' '
	gem-sim -q -n 2 --steps 5 --model tiny.json --data data --rule sync --lr 0.1 made >made.tsv &&
	grep -q "\"nworkers\": 2" made/run.json &&
	awk "NR==2 { exit !(\$2 == 5) }" made.tsv
'

test_expect_success 'more workers than gem-serve takes at once: 7,000, and gem-init --workers 7000' '
	gem-sim -q -n 7000 --steps 1 --model tiny.json --data data --lr 0.1 --seed 5 many >many.tsv &&
	grep -q "\"nworkers\": 7000" many/run.json &&
	awk "NR==2 { exit !(\$1 == 7000 && \$2 == 7000 && \$7 == 6999) }" many.tsv
'

test_expect_success 'gem-sim --gem-ref pull: stored in run.json, trains, and differs from commit' '
	gem-sim -q -n 3 --steps 20 --model tiny.json --data data --lr 0.1 --seed 5 --gem-ref pull \
		ref-pull >pull.tsv &&
	gem-sim -q -n 3 --steps 20 --model tiny.json --data data --lr 0.1 --seed 5 ref-commit >commit.tsv &&
	grep -q "\"gem_ref\": \"pull\"" ref-pull/run.json &&
	grep -q "\"gem_ref\": \"commit\"" ref-commit/run.json &&
	awk "NR==2 { exit !(\$2 == 60) }" pull.tsv &&
	blob ref-pull/params.gem >p.blob && blob ref-commit/params.gem >c.blob && ! cmp -s p.blob c.blob
'

test_expect_success 'a diverging run: workers stop as gem-work does, exit 1' '
	init --lr 1000 --rule downpour div &&
	{ gem-sim -q -n 3 div >div.tsv 2>div.err; test $? = 1; } &&
	grep -q "\"done\":false" div/log.jsonl && grep -q diverged div.err
'

for bad in "-n 0 base" "-n x base" "--steps 0 base" "--step-time foo:1 base" "--step-time normal:1 base" \
	"--jitter 1 base" "--stragglers 2 base" "-n 2 --stragglers 3:2 base" "--stragglers 1:0.5 base" \
	"--latency -1 base" "--server-time x base" "--die 1 base" "--die 5@1 base" "--join -1 base" \
	"--threads 0 base" "-n 16385 base" "--timing rr base" "--speed-spread -1 base" "--speed-spread 11 base" \
	"--timing measured --replay base/log.jsonl r2" "--bogus base" "" "base extra" "--model"; do
	test_expect_code 2 "bad usage: gem-sim $bad" "gem-sim $bad"
done
test_expect_code 2 'not a run, and gem-init refuses its options' 'gem-sim -n 2 --model nosuchmodel newrun'
test_expect_success 'a RUNDIR that is not a run, and no gem-init option: refused, nothing made' '
	{ gem-sim -q -n 2 --steps 3 bsae >out 2>err; test $? = 2; } &&
	grep -q "bsae: not a run" err && test ! -e bsae && test ! -s out &&
	mkdir empty && { gem-sim -q -n 2 empty/ 2>err; test $? = 2; } &&
	grep -q "empty/: not a run" err && test -z "$(ls empty)"
'

test_expect_success '--help lists every option, and the man page has each' '
	gem-sim --help >help.txt &&
	sed -e "s/\\\\-/-/g" -e "s/\\\\f[BIRP]//g" "$GEM_SRC/man/man1/gem-sim.1" >man.txt &&
	(
	for o in --workers --steps --step-time --jitter --speed-spread --timing --stragglers --latency --server-time --die \
		--join --threads --quiet --help --version; do
		grep -q -- "$o\\b" help.txt || { echo "help lacks $o"; exit 1; }
	done &&
	for o in $(grep -o -- "--[a-z][a-z-]*" help.txt | sort -u); do
		grep -q -- "$o\\b" man.txt || { echo "man page lacks $o"; exit 1; }
	done
	)
'
test_expect_code 2 'rule dma is refused, not simulated wrongly' '
	gem-init -q --model tiny.json --data data --rule dma --workers 2 dmarun &&
	gem-sim -n 2 dmarun 2>err; rc=$?; cat err; grep -q "dma" err; exit $rc
'
test_expect_success 'a run already trained: gem-sim says it is not resuming it' '
	cp -r base again &&
	gem-sim -q -n 2 --steps 3 again >/dev/null &&
	gem-sim -n 2 --steps 3 again >/dev/null 2>err &&
	grep -q "at version 6 already: the simulated workers train a full budget" err
'
test_expect_success 'a worker that joins after every other one finished still trains' '
	cp -r base late &&
	gem-sim -q -n 1 --steps 2 --join 100 late >late.tsv &&
	test $(grep -c "\"event\":\"join\"" late/log.jsonl) = 2 &&
	head -1 late/params.gem | grep -q "\"version\":4"
'
test_done
