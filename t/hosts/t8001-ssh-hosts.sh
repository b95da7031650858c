#!/bin/bash
# t8001: gem-run --hosts and share/gem/examples/ssh.sh over real ssh, between three hosts made
# of network namespaces (each with its own sshd, address and /etc/hosts): 2 and 3 hosts, the
# token never on a command line; SGP over ssh (a RUNDIR not shared, through --ssh CMD too); 32
# slots on one host (sshd's MaxStartups).
. "$(dirname "$0")/lib-hosts.sh"
hosts_need

TINY="--model tiny.json --data data --batch 32 --lr 0.1 --seed 3"

test_expect_success 'setup: three hosts, tiny data' '
	hosts_setup 3 &&
	make_tiny_data data &&
	on_host 2 ssh node3 "cat /etc/hosts; command -v gem-work" </dev/null
'

test_expect_success 'gem-run --hosts: 2 hosts, 2 workers over ssh, HTTPS' '
	printf "node2\nnode3\n" >hosts2 &&
	GEM_HOST=node1 on_host 1 gem-run -q --hosts hosts2 --epochs 1 $TINY \
		--work-opt=--slowdown=10 run2 >eval2.tsv &&
	cat eval2.tsv &&
	awk "NR == 2 && \$2 == 126 && \$5 > 0.8 { ok = 1 } END { exit !ok }" eval2.tsv &&
	test $(grep -c "\"event\":\"join\"" run2/log.jsonl) = 2 &&
	hosts_wait_clean
'

test_expect_success 'gem-run --hosts: 3 hosts, 2 slots on one, the token on no command line' '
	printf "node1\nnode2 2\nnode3\n" >hosts3 &&
	{ GEM_HOST=node1 on_host 1 gem-run -q --hosts hosts3 --epochs 1 $TINY \
		--work-opt=--slowdown=40 run3 >eval3.tsv & pid=$!; } &&
	test_when_finished "stop_if_running $pid" &&
	: >ps.out &&
	while kill -0 $pid 2>/dev/null; do ps -eo args >>ps.out; sleep 0.05; done &&
	grep "^gem-work -q --server https://node1:" ps.out | sort -u >workers.seen &&
	cat workers.seen && test $(wc -l <workers.seen) = 4 &&
	! grep -q -F "$(cat run3/token)" ps.out &&
	wait_exit $pid 120 &&
	cat eval3.tsv &&
	awk "NR == 2 && \$2 == 252 && \$5 > 0.8 { ok = 1 } END { exit !ok }" eval3.tsv &&
	test $(grep -c "\"event\":\"join\"" run3/log.jsonl) = 4 &&
	hosts_wait_clean
'

test_expect_success 'share/gem/examples/ssh.sh on 2 hosts' '
	printf "node2\nnode3 2\n" >hosts-ex &&
	GEM_HOST=node1 on_host 1 sh "$GEM_SHARE_DIR/examples/ssh.sh" hosts-ex run-ex --epochs 1 \
		$TINY >eval-ex.tsv &&
	cat eval-ex.tsv &&
	test "$(grep -vc "^#" eval-ex.tsv)" = 1 &&
	test $(grep -c "\"event\":\"join\"" run-ex/log.jsonl) = 3 &&
	hosts_wait_clean
'

test_expect_success 'gem-run --rule sgp --hosts: 3 nodes on 3 hosts over HTTPS, bit-identical to a local run' '
	printf "node1\nnode2\nnode3\n" >hosts-sgp &&
	on_host 1 gem-run -q --rule sgp --hosts hosts-sgp --epochs 1 $TINY run-sgp >sgp.tsv &&
	cat sgp.tsv &&
	for i in 0 1 2; do grep -q "https://node$((i + 1)):" run-sgp/node-$i.jsonl || return 1; done &&
	gem-run -q --rule sgp -n 3 --epochs 1 $TINY run-sgp-local >sgp-local.tsv &&
	awk -F"\t" "!/^#/ { print \$1, \$3, \$5, \$6 }" sgp.tsv >a &&
	awk -F"\t" "!/^#/ { print \$1, \$3, \$5, \$6 }" sgp-local.tsv >b &&
	diff a b &&
	hosts_wait_clean
'

test_expect_success 'gem-run --rule sgp --hosts, RUNDIR not shared: copied to the hosts and back' '
	# RUNDIR on a tmpfs that only gem-run sees (ip netns exec gives it a mount namespace
	# of its own): every host gets a copy of the run (a tar stream over ssh), and gives back
	# its node files
	mkdir -p priv &&
	on_host 1 sh -c "mount -t tmpfs gem-t8001 $PWD/priv &&
		gem-run -q --rule sgp --hosts hosts-sgp --epochs 1 --model $PWD/tiny.json \
			--data $PWD/data --batch 32 --lr 0.1 --seed 3 $PWD/priv/run >sgp-priv.tsv &&
		ls $PWD/priv/run >priv.ls" &&
	cat sgp-priv.tsv priv.ls &&
	grep -q "^node-2.gem$" priv.ls && grep -q "^node-0.jsonl$" priv.ls &&
	# the hosts wrote theirs beneath the tmpfs, where gem-run does not look
	test -s priv/run/node-1.gem && test -s priv/run/run.json &&
	awk -F"\t" "!/^#/ { print \$1, \$3, \$5, \$6 }" sgp-priv.tsv >c &&
	diff b c &&
	hosts_wait_clean
'

test_expect_success 'gem-run --ssh CMD, RUNDIR not shared: every connection and copy through CMD' '
	printf "#!/bin/sh\necho call >>%s/myssh.log\nexec ssh \"\$@\"\n" "$PWD" >myssh &&
	chmod +x myssh && : >myssh.log && mkdir -p priv2 &&
	on_host 1 sh -c "mount -t tmpfs gem-t8001-ssh $PWD/priv2 &&
		gem-run -q --ssh \"$PWD/myssh -o ConnectionAttempts=1\" --rule sgp --hosts hosts-sgp \
			--epochs 1 --model $PWD/tiny.json --data $PWD/data --batch 32 --lr 0.1 --seed 3 \
			$PWD/priv2/run >sgp-priv2.tsv" &&
	cat sgp-priv2.tsv myssh.log &&
	awk -F"\t" "!/^#/ { print \$1, \$3, \$5, \$6 }" sgp-priv2.tsv >d &&
	diff b d &&
	# the probe, the marker, the copies out, the nodes, the peer list and the copies back
	test $(wc -l <myssh.log) -ge 12 &&
	hosts_wait_clean
'

test_expect_success '32 slots on one host: every worker joins (connections retried past MaxStartups)' '
	echo "node2 32" >hosts32 &&
	GEM_HOST=node1 on_host 1 gem-run -q --hosts hosts32 --no-tls --epochs 1 $TINY --batch 8 \
		--work-opt=--slowdown=2 run32 >eval32.tsv 2>err32 &&
	cat err32 eval32.tsv &&
	echo "connections sshd dropped, then retried: $(cat run32/worker-*.log | grep -c kex_exchange_identification)" &&
	test $(grep -c "\"event\":\"join\"" run32/log.jsonl) = 32 &&
	test "$(grep -vc "^#" eval32.tsv)" = 1 &&
	hosts_wait_clean
'
test_done
