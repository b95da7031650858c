#!/bin/bash
# t5010: what 0.1.0 called a "shard" still works, for a release. The options --shard (gem-work's
# is --part, gem-serve's --slice), --shards (gem-sim's and gem-run's --slices) and --shard-hosts
# (gem-run's --slice-hosts); and a run made by 0.1.0, whose run.json says "shard": true and whose
# servers keep their files in shard-I-of-K/, opens, evaluates, exports and resumes as it was.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --rule gem --workers 2 --lr 0.05 --batch 16 \
		--seed 4 base
'

test_expect_success 'gem-serve --shard I/K is --slice I/K' '
	cp -r base srv &&
	{ gem-serve --listen 127.0.0.1:0 --shard 0/2 srv >/dev/null 2>srv0.err & sp0=$!; } &&
	test_bg $sp0 &&
	{ gem-serve --listen 127.0.0.1:0 --shard 1/2 srv >/dev/null 2>srv1.err & sp1=$!; } &&
	test_bg $sp1 &&
	wait_for_file srv/slice-0-of-2/server.url && wait_for_file srv/slice-1-of-2/server.url &&
	grep -q "\"slice\":{\"i\":1,\"k\":2" srv/slice-1-of-2/log.jsonl
'

test_expect_success 'gem-work --shard I/N is --part I/N' '
	gem-work --server srv --steps 4 --shard 1/2 2>work.err &&
	cat work.err && grep -q "samples per epoch (a part)$" work.err &&
	kill -TERM $sp0 $sp1 && { wait_exit $sp0 30; test $? = 143; } && { wait_exit $sp1 30; test $? = 143; }
'

test_expect_success 'gem-sim --shards K is --slices K' '
	cp -r base sim-old && cp -r base sim-new &&
	gem-sim -q -n 2 --steps 4 --shards 2 sim-old >/dev/null &&
	gem-sim -q -n 2 --steps 4 --slices 2 sim-new >/dev/null &&
	test -d sim-old/slice-1-of-2 &&
	python3 "$GEM_SRC/t/gem-theta.py" sim-old >old.bin &&
	python3 "$GEM_SRC/t/gem-theta.py" sim-new >new.bin && cmp old.bin new.bin
'

test_expect_success 'gem-run --shards K is --slices K, --shard-hosts is --slice-hosts' '
	gem-run -q -n 1 --shards 2 --model tiny.json --data data --batch 16 --steps 4 grun >grun.tsv &&
	test -s grun/slice-0-of-2/log.jsonl && test -s grun/slice-1-of-2/log.jsonl &&
	echo localhost >one-host &&
	{ gem-run -n 1 --shard-hosts one-host --model tiny.json --data data gr2 2>err; test $? = 2; } &&
	grep -q "^gem-run: --slice-hosts: needs --slices 2 or more" err
'

# A run as 0.1.0 left it: run.json with "shard": true, its servers' files in shard-I-of-K/
# and their start events naming the slice "shard".
test_expect_success 'setup: a sliced run of 0.1.0, its data in parts' '
	cp -r base old &&
	python3 -c "
import json, sys
p = sys.argv[1] + \"/run.json\"
j = json.load(open(p)); j[\"shard\"] = True; json.dump(j, open(p, \"w\"), indent=2)" old &&
	gem-sim -q -n 2 --steps 4 --slices 2 old >/dev/null &&
	gem-eval old >before.tsv && gem-export -q old >before.st &&
	for i in 0 1; do
		mv old/slice-$i-of-2 old/shard-$i-of-2 &&
		sed -i "s/\"slice\":{\"i\"/\"shard\":{\"i\"/" old/shard-$i-of-2/log.jsonl || return 1
	done &&
	! grep -q "part_data" old/run.json
'

test_expect_success 'a run of 0.1.0 evaluates and exports as it did' '
	gem-eval old >after.tsv && cmp before.tsv after.tsv &&
	gem-export -q old >after.st && cmp before.st after.st &&
	gem-plot-data loss old >plot.tsv && grep "^# run:" plot.tsv >runs-of-plot &&
	cat runs-of-plot && test $(wc -l <runs-of-plot) = 2 &&
	grep -q "gem, 2 workers, slice 1/2" runs-of-plot
'

test_expect_success 'a run of 0.1.0 resumes in its own directories, its workers on parts' '
	for i in 0 1; do
		{ gem-serve --listen 127.0.0.1:0 --slice $i/2 old >/dev/null 2>old$i.err & eval op$i=\$!; } ||
		return 1
	done &&
	test_bg $op0 && test_bg $op1 &&
	wait_for_file old/shard-0-of-2/server.url && wait_for_file old/shard-1-of-2/server.url &&
	gem-work --server old --steps 2 2>owork.err &&
	# the three workers of the run have all finished now: each server stops by itself
	{ wait_exit $op0 30; test $? = 0; } && { wait_exit $op1 30; test $? = 0; } &&
	cat owork.err && grep -q "samples per epoch (a part)$" owork.err &&
	! test -e old/slice-0-of-2 && ! test -e old/slice-1-of-2 &&
	test $(grep -c "\"event\":\"start\"" old/shard-1-of-2/log.jsonl) = 2 &&
	gem-eval old | tail -1 >resumed.tsv && ! cmp -s resumed.tsv <(tail -1 before.tsv)
'

test_done
