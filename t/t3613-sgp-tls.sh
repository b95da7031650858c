#!/bin/bash
# t3613: SGP nodes over HTTPS (gem-work --tls-cert, --tls-key, --cacert): three TLS nodes end
# with the parameters of the same plain run, bit for bit, by hand and with gem-run --tls; a
# peer whose certificate another CA signed is refused (exit 1); plain HTTP to a TLS node gets
# no answer; a peer list that mixes http:// and https:// is refused; bad TLS options.
. "$(dirname "$0")/test-lib.sh"

# same_theta A B: the node files A and B hold the same parameters, bit for bit
same_theta() {
	python3 "$GEM_SRC/t/gem-theta.py" "$1" >a.theta && python3 "$GEM_SRC/t/gem-theta.py" "$2" >b.theta &&
	test -s a.theta && cmp a.theta b.theta
}

RUN_OPTS="--model tiny.json --data data --lr 0.1 --batch 32 --seed 3"

# node I RUNDIR [OPTS]: start node I of the run in RUNDIR in the background (its URL in
# RUNDIR/node-I.url, its errors in RUNDIR/node-I.err), waiting for RUNDIR/peers
node() {
	_i=$1 _d=$2 && shift 2 &&
	gem-work -q --rule sgp --run "$_d" --node "$_i" --peers-file "$_d/peers" --steps 8 \
		--retry-for 60 "$@" >"$_d/node-$_i.url" 2>"$_d/node-$_i.err" &
}

# peers RUNDIR N: once the first N nodes have their URLs, the peer list from them
peers() {
	for ((_j = 0; _j < $2; _j++)); do wait_for_file "$1/node-$_j.url" || return 1; done &&
	cat $(for ((_j = 0; _j < $2; _j++)); do echo "$1/node-$_j.url"; done) >"$1/peers.tmp" &&
	mv "$1/peers.tmp" "$1/peers"
}

test_expect_success 'setup: data, a plain gem-run of 3 SGP nodes, two CAs' '
	make_tiny_data data &&
	gem-run -q -n 3 --rule sgp --steps 8 $RUN_OPTS plain >plain.tsv &&
	grep -q "^http://127.0.0.1:" plain/peers &&
	self_signed ca && self_signed other
'

test_expect_success 'three TLS nodes by hand: https:// URLs, the plain run bit for bit' '
	mkdir hand && cp plain/run.json plain/params.gem hand/ &&
	tls="--tls-cert ca.crt --tls-key ca.key --cacert ca.crt" &&
	node 0 hand $tls && p0=$! && node 1 hand $tls && p1=$! && node 2 hand $tls && p2=$! &&
	test_bg "$p0 $p1 $p2" &&
	peers hand 3 && cat hand/peers &&
	test "$(grep -c "^https://127.0.0.1:[0-9]*$" hand/peers)" = 3 &&
	wait $p0 && wait $p1 && wait $p2 &&
	for i in 0 1 2; do same_theta plain/node-$i.gem hand/node-$i.gem || return 1; done
'

test_expect_success 'gem-run --tls --rule sgp: HTTPS nodes, the plain run bit for bit' '
	gem-run -q -n 3 --tls --rule sgp --steps 8 $RUN_OPTS tlsrun >tls.tsv &&
	cat tls.tsv && grep -q "^average" tls.tsv &&
	test "$(grep -c "^https://127.0.0.1:[0-9]*$" tlsrun/peers)" = 3 &&
	grep -q "BEGIN CERTIFICATE" tlsrun/tls-cert.pem &&
	for i in 0 1 2; do same_theta plain/node-$i.gem tlsrun/node-$i.gem || return 1; done
'

test_expect_success 'a peer whose certificate another CA signed is refused: exit 1, said why' '
	mkdir bad && cp plain/run.json plain/params.gem bad/ &&
	node 0 bad --tls-cert ca.crt --tls-key ca.key --cacert ca.crt --retry-for 10 && p0=$! &&
	node 1 bad --tls-cert other.crt --tls-key other.key --cacert ca.crt --retry-for 10 && p1=$! &&
	test_bg "$p0 $p1" &&
	peers bad 2 &&
	{ wait $p0; rc=$?; } && cat bad/node-0.err && test $rc = 1 &&
	grep -q "node 0: hello to node 1 (https://127.0.0.1:[0-9]*): .*TLS: the server is not trusted" \
		bad/node-0.err &&
	{ wait $p1; rc=$?; } && cat bad/node-1.err && test $rc = 1 &&
	test ! -e bad/node-0.gem
'

test_expect_success 'plain HTTP to a TLS node gets no answer; HTTPS with its CA does' '
	mkdir wait && cp plain/run.json plain/params.gem wait/ &&
	node 0 wait --tls-cert ca.crt --tls-key ca.key --cacert ca.crt && pid=$! &&
	test_bg $pid && test_when_finished "stop_if_running $pid" &&
	wait_for_file wait/node-0.url && u=$(cat wait/node-0.url) &&
	case $u in https://127.0.0.1:*) ;; *) false ;; esac &&
	curl -sf --cacert ca.crt "$u/v1/health" | grep -q "\"ready\": *false" &&
	! curl -sf --max-time 5 "http://127.0.0.1:${u##*:}/v1/health" &&
	! curl -sf --max-time 5 -X POST --data-binary "{}" "http://127.0.0.1:${u##*:}/v1/hello" &&
	! curl -sf --max-time 5 --cacert other.crt "$u/v1/health" &&
	curl -sf --cacert ca.crt "$u/v1/health" >/dev/null
'

test_expect_success 'a peer list that mixes http:// and https:// is refused, both ways' '
	mkdir mixed && cp plain/run.json plain/params.gem mixed/ &&
	node 0 mixed --tls-cert ca.crt --tls-key ca.key --cacert ca.crt && p0=$! &&
	node 1 mixed && p1=$! && test_bg "$p0 $p1" &&
	peers mixed 2 &&
	{ wait $p0; rc0=$?; } && { wait $p1; rc1=$?; } && cat mixed/node-0.err mixed/node-1.err &&
	test $rc0 = 2 && test $rc1 = 2 &&
	grep -q "peer 1 is http://127.0.0.1:[0-9]* but this node is https://.*every node of a run speaks HTTPS" \
		mixed/node-0.err &&
	grep -q "peer 0 is https://127.0.0.1:[0-9]* but this node is http://" mixed/node-1.err
'

test_expect_success 'bad TLS options of an SGP node: exit 2, said why' '
	sgp="--rule sgp --run plain --peers-file plain/peers" &&
	exits 2 gem-work $sgp --tls-cert ca.crt 2>err && grep -q "go together" err &&
	exits 2 gem-work $sgp --cacert ca.crt 2>err && grep -q "give --tls-cert" err &&
	exits 2 gem-work --local plain --tls-cert ca.crt --tls-key ca.key 2>err &&
	grep -q "are for SGP nodes" err &&
	exits 2 gem-work $sgp --tls-cert tiny.json --tls-key ca.key 2>err && cat err &&
	grep -q "tiny.json: not a PEM file" err &&
	exits 2 gem-work $sgp --tls-cert ca.crt --tls-key no-such.key 2>err && cat err &&
	grep -q "no-such.key" err
'

test_done
