#!/bin/bash
# t8003: gem-run --slices K --slice-hosts FILE: each slice's gem-serve on a host of its own over
# ssh (HTTPS, the token on no command line), the workers on other hosts committing to every
# slice; with RUNDIR shared, and with RUNDIR private to gem-run's host (the slices' directories
# copied there and back; a new run there does not resume what the hosts kept).
. "$(dirname "$0")/lib-hosts.sh"
hosts_need

test_expect_success 'setup: three hosts; the slices on node2 and node3, workers on node1 and node3' '
	hosts_setup 3 && make_tiny_data data &&
	printf "node2\nnode3\n" >slice-hosts && printf "node1\nnode3\n" >worker-hosts
'

test_expect_success 'two slices on node2 and node3, workers on node1 and node3' '
	{ GEM_HOST=node1 on_host 1 gem-run -q --hosts worker-hosts --slices 2 --slice-hosts slice-hosts \
		--epochs 1 --model tiny.json --data data --batch 32 --lr 0.1 --seed 3 \
		--work-opt=--slowdown=10 run >eval.tsv & pid=$!; } &&
	test_when_finished "stop_if_running $pid" &&
	: >ps.out &&
	while kill -0 $pid 2>/dev/null; do ps -eo args >>ps.out; sleep 0.05; done &&
	wait_exit $pid 120 &&
	cat eval.tsv &&
	awk "NR == 2 && \$5 > 0.8 { ok = 1 } END { exit !ok }" eval.tsv &&
	for k in 0 1; do
		test $(grep -c "\"event\":\"join\"" run/slice-$k-of-2/log.jsonl) = 2 || return 1
	done &&
	grep "^gem-work -q --server https://node2:[0-9]*,https://node3:" ps.out | sort -u >workers.seen &&
	cat workers.seen && test $(wc -l <workers.seen) = 2 &&
	grep -q "^gem-serve --listen 0.0.0.0:0 --public --token-file /dev/stdin .* --slice 1/2" ps.out &&
	! grep -q -F "$(cat run/token)" ps.out &&
	hosts_wait_clean
'

test_expect_success 'RUNDIR private to gem-run: the slices are copied out and back' '
	mkdir -p priv &&
	on_host 1 sh -c "mount -t tmpfs gem-t8003 $PWD/priv &&
		GEM_HOST=node1 gem-run -q --hosts $PWD/worker-hosts --slices 2 \
			--slice-hosts $PWD/slice-hosts --epochs 1 --model $PWD/tiny.json \
			--data $PWD/data --batch 32 --lr 0.1 --seed 3 $PWD/priv/run >priv.tsv &&
		ls $PWD/priv/run/slice-0-of-2 $PWD/priv/run/slice-1-of-2 >priv.ls &&
		gem-eval $PWD/priv/run >priv-again.tsv" &&
	cat priv.tsv priv.ls &&
	grep -q "^params.gem$" priv.ls && test $(grep -c "^log.jsonl$" priv.ls) = 2 &&
	awk "NR == 2 && \$5 > 0.8 { ok = 1 } END { exit !ok }" priv.tsv &&
	cmp priv.tsv priv-again.tsv &&
	# the slice hosts wrote theirs beneath the tmpfs, where gem-run does not look
	test -s priv/run/slice-1-of-2/params.gem &&
	hosts_wait_clean
'

test_expect_success 'a new private run at the same path starts afresh on the slice hosts' '
	# the hosts still hold the slices of the run above, at the same path
	test -s priv/run/slice-0-of-2/log.jsonl &&
	on_host 1 sh -c "mount -t tmpfs gem-t8003 $PWD/priv &&
		GEM_HOST=node1 gem-run -q --hosts $PWD/worker-hosts --slices 2 \
			--slice-hosts $PWD/slice-hosts --epochs 1 --model $PWD/tiny.json \
			--data $PWD/data --batch 32 --lr 0.1 --seed 3 $PWD/priv/run >again.tsv &&
		cat $PWD/priv/run/slice-0-of-2/log.jsonl >again.log" &&
	cat again.tsv &&
	test $(grep -c "\"event\":\"join\"" again.log) = 2 &&
	! grep -q "\"rejoin\":true" again.log &&
	hosts_wait_clean
'

test_expect_success 'a slice host that ssh cannot reach: exit 1, said by name, before anything starts' '
	printf "node2\nnode9\n" >bad-slice-hosts &&
	{ GEM_HOST=node1 on_host 1 gem-run -q --hosts worker-hosts --slices 2 \
		--slice-hosts bad-slice-hosts --epochs 1 --model tiny.json --data data bad \
		>bad.tsv 2>bad.err; test $? = 1; } &&
	cat bad.err &&
	grep -q "^gem-run: cannot run a command on node9 over ssh" bad.err &&
	test ! -s bad.tsv && test ! -e bad/serve-0.url &&
	hosts_wait_clean
'

test_done
