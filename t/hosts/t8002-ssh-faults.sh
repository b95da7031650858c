#!/bin/bash
# t8002: gem-run --hosts over real ssh when things go wrong: Ctrl-C and SIGHUP stop every
# process it started on every host (also SGP nodes, which save their state), and so does
# gem-run killed outright (SIGKILL to it alone); a hung host (its
# sshd stopped) fails the run in bounded time, naming the host; a host that cannot resolve the
# server's name is caught before any worker starts, with the advice to set GEM_HOST; a worker
# that fails is named with its host and exit status, without a 10 s wait or a TSV.
. "$(dirname "$0")/lib-hosts.sh"
hosts_need

TINY="--model tiny.json --data data --batch 32 --lr 0.1 --seed 3"
LONG="--epochs 2000 --work-opt=--slowdown=20"

# running_on I PATTERN: a process matching PATTERN runs on host I.
running_on() {
	for p in $(ip netns pids "$HOSTS_NS-$1"); do
		ps -o args= -p "$p" 2>/dev/null | grep -q -- "$2" && return 0
	done
	return 1
}

# interrupted SIGNAL STATUS RUNDIR [gem-run options]: start gem-run on node1 with workers on
# node2 and node3 in a process group of its own (as a terminal job), wait until they all train,
# send SIGNAL to the group and check gem-run's exit STATUS and that no host runs anything.
interrupted() {
	sig=$1 want=$2 dir=$3
	shift 3
	setsid env --default-signal=INT GEM_HOST=node1 ip netns exec "$HOSTS_NS-1" \
		gem-run -q --hosts hosts $TINY "$@" "$dir" >"$dir.out" 2>"$dir.err" &
	pid=$!
	test_bg $pid
	for i in $(seq 300); do
		running_on 2 "^gem-work" && running_on 3 "^gem-work" && break
		sleep 0.1
	done
	running_on 2 "^gem-work" && running_on 3 "^gem-work" || { cat "$dir.err"; return 1; }
	sleep 1
	kill -"$sig" -- -$pid
	wait_exit $pid 60
	rc=$?
	cat "$dir.err"
	echo "gem-run exit $rc"
	test $rc = "$want" && hosts_wait_clean
}

test_expect_success 'setup: three hosts, tiny data; node1 alone knows the name node1-only' '
	hosts_setup 3 &&
	echo "10.77.0.11 node1-only" >>/etc/netns/$HOSTS_NS-1/hosts &&
	make_tiny_data data &&
	printf "node2\nnode3\n" >hosts
'

test_expect_success 'Ctrl-C on gem-run --hosts: exit 130, no worker left on any host' '
	interrupted INT 130 run-int $LONG &&
	tail -1 run-int/log.jsonl | grep -q "\"event\":\"stop\""
'

test_expect_success 'SIGHUP on gem-run --hosts (the terminal closed): exit 129, nothing left' '
	interrupted HUP 129 run-hup $LONG &&
	tail -1 run-hup/log.jsonl | grep -q "\"event\":\"stop\""
'

test_expect_success 'Ctrl-C on gem-run --rule sgp --hosts: every remote node stops and saves' '
	interrupted INT 130 run-sgp --rule sgp $LONG &&
	test -s run-sgp/node-0.gem && test -s run-sgp/node-1.gem
'

test_expect_success 'gem-run alone killed outright (SIGKILL): nothing it started is left on any host' '
	{ GEM_HOST=node1 ip netns exec "$HOSTS_NS-1" gem-run -q --hosts hosts $TINY $LONG run-kill \
		>kill.out 2>kill.err & pid=$!; } &&
	test_bg $pid &&
	for i in $(seq 300); do
		running_on 2 "^gem-work" && running_on 3 "^gem-work" && break
		sleep 0.1
	done &&
	running_on 2 "^gem-work" && running_on 3 "^gem-work" &&
	kill -KILL $pid &&
	hosts_wait_clean &&
	tail -1 run-kill/log.jsonl | grep -q "\"event\":\"stop\""
'

test_expect_success 'a hung host (sshd stopped): gem-run fails in bounded time, naming it' '
	kill -STOP ${HOSTS_SSHD[3]} &&
	test_when_finished "kill -CONT ${HOSTS_SSHD[3]}" &&
	{ GEM_HOST=node1 GEM_SSH_TIMEOUT=2 on_host 1 gem-run -q --hosts hosts --epochs 1 $TINY \
		run-hung >hung.out 2>hung.err & pid=$!; } &&
	{ wait_exit $pid 60; rc=$?; } ; cat hung.err; test $rc = 1 &&
	grep "node3" hung.err && grep -q "timed out" hung.err &&
	test ! -s hung.out && test ! -e run-hung/worker-0.log
'

test_expect_success 'a host that cannot resolve the server name: caught up front, GEM_HOST advised' '
	{ GEM_HOST=node1-only on_host 1 gem-run -q --hosts hosts --epochs 1 $TINY run-name \
		>name.out 2>name.err; rc=$?; } ; cat name.err; test $rc = 1 &&
	grep -q "node2 cannot resolve node1-only.*GEM_HOST" name.err &&
	grep -q "node3 cannot resolve node1-only.*GEM_HOST" name.err &&
	test ! -s name.out && test ! -e run-name/worker-0.log
'

test_expect_success 'a worker that fails: its host and exit status, no TSV' '
	printf "node2\nnode3\n" >hosts &&
	{ GEM_HOST=node1 on_host 1 gem-run -q --hosts hosts $TINY $LONG \
		--work-opt=--die-after=3 run-fail >fail.out 2>fail.err; rc=$?; } ; cat fail.err &&
	test $rc = 1 &&
	grep -q "worker 0 on node2 failed (exit status 137\|worker 0 on node2 failed (killed by signal 9)" fail.err &&
	grep -q "worker 1 on node3 failed" fail.err &&
	test ! -s fail.out && hosts_wait_clean
'
test_done
