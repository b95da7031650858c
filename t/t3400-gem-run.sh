#!/bin/bash
# t3400: gem-run over (fake) ssh with --hosts, its bad usage, and interrupting it: SIGTERM to
# gem-run, or SIGINT to its whole process group as Ctrl-C sends it, stops every process it
# started, exits 143 (130 for SIGINT) and leaves a run that gem-eval reads and gem-run --resume continues.
. "$(dirname "$0")/test-lib.sh"

TINY="--model tiny.json --data data --batch 32 --lr 0.1 --seed 3"

# test_expect_fail_ CMD...: CMD exits 1.
test_expect_fail_() { "$@"; test $? = 1; }

# started_by PID: the pids of PID's children, grandchildren and so on.
started_by() {
	for c in $(pgrep -P "$1"); do
		echo "$c"
		started_by "$c"
	done
}

# none_left PID...: none of the processes is alive (zombies count as gone).
none_left() {
	for p in "$@"; do
		s=$(ps -o stat= -p "$p" 2>/dev/null) || continue
		case $s in Z*) ;; *) echo "left running: $(ps -o pid=,args= -p "$p")"; return 1 ;; esac
	done
}

test_expect_success 'setup: tiny data, fake ssh and hostname' '
	make_tiny_data data &&
	make_fake_ssh fakebin &&
	printf "#!/bin/sh\necho localhost\n" >fakebin/hostname &&
	chmod +x fakebin/* &&
	FAKE_SSH_LOG=$PWD/ssh.log && export FAKE_SSH_LOG
'

test_expect_success 'gem-run --hosts: 2 hosts x 1 slot, 2 workers over ssh' '
	printf "# two hosts\nnodeA\nnodeB 1\n" >hosts &&
	: >ssh.log && : >ssh.log.cmd && : >ssh.log.args &&
	# slowed down: gem-serve stops once the workers that have joined are done, so a
	# worker that joins late would find it gone
	PATH="$PWD/fakebin:$PATH" gem-run -q --hosts hosts -n 2 --epochs 1 $TINY \
		--work-opt=--slowdown=20 run-ssh >eval.tsv &&
	cat eval.tsv &&
	head -1 eval.tsv | grep -q "^# elapsed	version	samples	test_loss	test_acc	bytes$" &&
	awk "NR == 2 && \$2 == 126 && \$5 > 0.8 { ok = 1 } END { exit !ok }" eval.tsv &&
	printf "nodeA\nnodeB\n" >ssh.want && sort -u ssh.log | diff ssh.want - &&
	# HTTPS by default over the network: the workers trust the run'"'"'s own certificate
	test $(grep -c "gem-remote .*gem-work .*--server https://localhost:[0-9]* .*--cacert $PWD/run-ssh/tls-cert.pem" ssh.log.cmd) = 2 &&
	grep -q "\"url\":\"https://[^\"]*:[0-9]*\"" run-ssh/log.jsonl &&
	# every ssh gives up on a host that does not answer or hangs
	test $(grep -c "ConnectTimeout=10 -o ServerAliveInterval=15" ssh.log.args) = $(wc -l <ssh.log)
'

test_expect_code 2 'gem-run without RUNDIR' 'gem-run -n 2 $TINY'
test_expect_code 2 'gem-run -n 0' 'gem-run -n 0 $TINY run-x'
test_expect_code 2 'gem-run -n two' 'gem-run -n two $TINY run-x'
test_expect_code 2 'gem-run with two RUNDIRs' 'gem-run -n 1 $TINY run-x run-y'
test_expect_code 2 'gem-run --hosts with an unreadable file' 'gem-run --hosts no-such-file run-x'
test_expect_code 2 'gem-run --hosts with no hosts in the file' '
	echo "# nobody" >nohosts && gem-run --hosts nohosts $TINY run-x
'
test_expect_code 2 'gem-run --resume with gem-init options' 'gem-run --resume --lr 0.1 run-ssh'
test_expect_code 2 'gem-run with a bad gem-init option' 'gem-run -q -n 1 --rule nosuch $TINY run-x'

test_expect_success 'a host ssh cannot reach: exit 1, the host named, nothing made, again the same' '
	mkdir -p deadbin &&
	printf "#!/bin/sh\ncase \" \$* \" in *\" deadhost \"*)\n\techo \"ssh: connect to host deadhost port 22: Connection refused\" >&2; exit 255 ;;\nesac\nexec \"%s/fakebin/ssh\" \"\$@\"\n" "$PWD" >deadbin/ssh &&
	chmod +x deadbin/ssh &&
	printf "nodeA\ndeadhost\n" >deadhosts &&
	for i in 1 2; do
		{ PATH="$PWD/deadbin:$PATH" gem-run -q --hosts deadhosts -n 2 $TINY run-dead 2>err; test $? = 1; } &&
		cat err && grep -q "^gem-run: cannot run a command on deadhost over ssh" err &&
		! grep -q "exists" err && test ! -e run-dead || return 1
	done &&
	{ PATH="$PWD/deadbin:$PATH" gem-run -q --rule sgp --hosts deadhosts -n 2 $TINY run-dead 2>err; test $? = 1; } &&
	grep -q "^gem-run: cannot run a command on deadhost over ssh" err && test ! -e run-dead
'

test_expect_success 'bad usage starts no server and makes no run' '
	test ! -e run-x && test ! -e run-y
'

# A long run: many epochs, and each worker step 1000 times slower.
LONG="--epochs 50 --work-opt=--slowdown=1000"

test_expect_success 'SIGTERM to gem-run: exit 143, nothing it started is left' '
	gem-run -q -n 2 $TINY $LONG run-term >term.out 2>term.err &
	pid=$! && test_bg $pid &&
	wait_for_file run-term/server.url 20 && wait_for_joins run-term 2 &&
	# a commit before the signal, so that the checkpoint below has something to show
	wait_until "test \"\$(health_version \$(cat run-term/server.url))\" -ge 1 2>/dev/null" 60 &&
	kids=$(started_by $pid) && echo "started: "$kids && test $(echo $kids | wc -w) -ge 3 &&
	for k in $kids; do test_bg $k; done &&
	test_when_finished "stop_if_running $pid $(echo $kids)" &&
	test $(pgrep -f -- "--server $(cat run-term/server.url)" | wc -l) = 2 &&
	pgrep -f "gem-serve .*run-term" &&
	kill -TERM $pid &&
	{ wait $pid; rc=$?; } ; echo "exit $rc" && test $rc = 143 &&
	cat term.err && grep -q "terminated" term.err &&
	none_left $kids &&
	! pgrep -f "gem-serve .*run-term" &&
	test -z "$(pgrep -f -- "--server $(cat run-term/server.url 2>/dev/null || echo none)")"
'

test_expect_success 'after SIGTERM: the server checkpointed, gem-eval reads the run' '
	tail -1 run-term/log.jsonl | grep -q "\"event\":\"stop\"" &&
	gem-eval run-term >eval.tsv && cat eval.tsv &&
	awk "NR == 2 && \$2 > 0 { ok = 1 } END { exit !ok }" eval.tsv
'

test_expect_success 'Ctrl-C (SIGINT to the process group): exit 130, nothing is left, how to go on' '
	# setsid: a process group of its own, as a terminal job has; env: SIGINT back to its
	# default, since a background job of a non-interactive shell starts with it ignored.
	setsid env --default-signal=INT gem-run -q -n 2 $TINY $LONG run-int >int.out 2>int.err &
	pid=$! && test_bg $pid &&
	wait_for_file run-int/server.url 20 && wait_for_joins run-int 2 &&
	test "$(ps -o pgid= -p $pid | tr -d " ")" = $pid &&
	kids=$(started_by $pid) && echo "started: "$kids && test $(echo $kids | wc -w) -ge 3 &&
	for k in $kids; do test_bg $k; done &&
	test_when_finished "stop_if_running $pid $(echo $kids)" &&
	kill -INT -- -$pid &&
	{ wait $pid; rc=$?; } ; echo "exit $rc" && test $rc = 130 &&
	none_left $kids &&
	! pgrep -f "gem-serve .*run-int" &&
	gem-eval run-int >int.tsv && cat int.tsv &&
	tail -1 run-int/log.jsonl | grep -q "\"event\":\"stop\"" &&
	# where it was checkpointed, and the command that continues it
	cat int.err && v=$(sed -n "1s/.*\"version\":\([0-9]*\).*/\1/p" run-int/params.gem) &&
	grep -q "^gem-run: interrupted; the server checkpointed at version $v\$" int.err &&
	grep -q "^gem-run: gem-run --resume -n 2 run-int continues the run\$" int.err
'

# One worker: gem-serve stops as soon as every worker that has joined is done, so a second
# worker of 5 steps may find the server gone.
test_expect_success 'gem-run --resume continues the interrupted run' '
	v0=$(awk "NR == 2 { print \$2 }" int.tsv) &&
	gem-run -q --resume -n 1 --work-opt=--steps=5 run-int >resume.tsv &&
	cat resume.tsv &&
	awk -v v0=$v0 "NR == 2 && \$2 == v0 + 5 { ok = 1 } END { exit !ok }" resume.tsv
'

updates() { grep -vc '"event"' "$1/log.jsonl"; }
version_of() { head -1 "$1/params.gem" | sed -n 's/.*"version":\([0-9]*\).*/\1/p'; }

# same_run A B: the same update count, version and θ, bit for bit
same_run() {
	echo "updates $(updates $1) $(updates $2), versions $(version_of $1) $(version_of $2)" &&
	test "$(updates $1)" = "$(updates $2)" && test "$(version_of $1)" = "$(version_of $2)" &&
	tail -n +2 "$1/params.gem" >"$1.theta" && tail -n +2 "$2/params.gem" >"$2.theta" &&
	cmp "$1.theta" "$2.theta"
}

test_expect_success 'interrupted (the server stopped at 40 updates) and resumed, one worker: the run left alone (but for the bytes of the rejoin)' '
	gem-run -q -n 1 $TINY --epochs 2 alone1 >alone1.tsv &&
	test_expect_fail_ gem-run -q -n 1 $TINY --epochs 2 --serve-opt=--max-updates=40 parts1 \
		>parts1.tsv 2>parts1.err &&
	cat parts1.err && test ! -s parts1.tsv && grep -q "checkpointed at version 40" parts1.err &&
	grep -q "\"event\":\"leave\".*\"done\":false" parts1/log.jsonl &&
	gem-run -q --resume -n 1 parts1 >parts1.tsv &&
	same_run alone1 parts1 && cut -f 2-5 alone1.tsv >a.tsv && cut -f 2-5 parts1.tsv >p.tsv && cmp a.tsv p.tsv
'

test_expect_success 'the same with two sync workers: they rejoin under their ids' '
	gem-run -q -n 2 $TINY --rule sync alone2 >alone2.tsv &&
	test_expect_fail_ gem-run -q -n 2 $TINY --rule sync --serve-opt=--max-updates=11 parts2 \
		>parts2.tsv 2>parts2.err &&
	test "$(grep -c "\"event\":\"leave\".*\"done\":false" parts2/log.jsonl)" = 2 &&
	gem-run -q --resume -n 2 parts2 >parts2.tsv &&
	grep "\"event\":\"join\"" parts2/log.jsonl &&
	test "$(grep -c "\"event\":\"join\".*\"worker\":[01][,}]" parts2/log.jsonl)" = 4 &&
	same_run alone2 parts2
'

test_expect_success 'gem-run --listen 0.0.0.0:0 without --hosts: a public server gets a token' '
	gem-run -q -n 1 --listen 0.0.0.0:0 $TINY pub >pub.tsv &&
	test -s pub/token && grep -q "test_acc" pub.tsv
'
test_expect_success 'gem-run --rule sgp --hosts with a relative RUNDIR: the nodes get its absolute path' '
	printf "localhost\n127.0.0.1\n" >hosts2 &&
	: >ssh.log && : >ssh.log.cmd && : >ssh.log.args &&
	PATH="$PWD/fakebin:$PATH" gem-run -q --rule sgp --hosts hosts2 -n 2 --epochs 1 $TINY \
		--listen 0.0.0.0:0 run-sgp-ssh >sgp.tsv &&
	test $(grep -c "gem-remote .*gem-work -q --rule sgp --run $PWD/run-sgp-ssh " ssh.log.cmd) = 2 &&
	test $(grep -c "token-file $PWD/run-sgp-ssh/token .*--peers-file $PWD/run-sgp-ssh/peers" ssh.log.cmd) = 2
'
test_expect_success 'gem-run --rule sgp --hosts: HTTPS nodes by default, one certificate for every host' '
	r=$PWD/run-sgp-ssh &&
	test $(grep -c -- "--tls-cert $r/tls-cert.pem --tls-key $r/tls-key.pem --cacert $r/tls-cert.pem" \
		ssh.log.cmd) = 2 &&
	grep -qx "https://localhost:[0-9]*" run-sgp-ssh/peers &&
	grep -qx "https://127.0.0.1:[0-9]*" run-sgp-ssh/peers &&
	openssl x509 -in run-sgp-ssh/tls-cert.pem -noout -ext subjectAltName >san &&
	cat san && grep -q "DNS:localhost" san && grep -q "IP Address:127.0.0.1" san &&
	: >ssh.log.cmd &&
	PATH="$PWD/fakebin:$PATH" gem-run -q --rule sgp --hosts hosts2 -n 2 --epochs 1 --no-tls $TINY \
		--listen 0.0.0.0:0 run-sgp-plain >sgp-plain.tsv &&
	test "$(grep -c "^http://" run-sgp-plain/peers)" = 2 &&
	! grep -q -- --tls-cert ssh.log.cmd && test ! -e run-sgp-plain/tls-cert.pem
'
test_expect_success 'gem-run --hosts --no-tls: plain HTTP' '
	: >ssh.log.cmd &&
	PATH="$PWD/fakebin:$PATH" gem-run -q --hosts hosts -n 2 --epochs 1 --no-tls $TINY \
		--work-opt=--slowdown=20 run-plain >plain.tsv &&
	test $(grep -c "gem-remote .*gem-work .*--server http://localhost:[0-9]*" ssh.log.cmd) = 2 &&
	! grep -q -- --cacert ssh.log.cmd && test ! -e run-plain/tls-cert.pem
'
test_expect_success 'gem-run killed outright (SIGKILL): its server and its workers over ssh stop' '
	# a name no other test run on this machine has: its processes are found by it
	rk=run-kill-$$ &&
	{ PATH="$PWD/fakebin:$PATH" gem-run -q --hosts hosts -n 2 $TINY $LONG $rk >/dev/null 2>kill.err & } &&
	pid=$! && test_bg $pid &&
	wait_for_file $rk/server.url 20 && wait_for_joins $rk 2 &&
	kids=$(started_by $pid) && echo "started: "$kids &&
	# what is left of them at the end (and still theirs, not a pid used again) is killed
	test_when_finished "for k in $(echo $kids); do ps -o args= -p \$k | grep -q $rk && kill -9 \$k; done; true" &&
	# every process it started names the run (its cacert, its directory, gem-run'"'"'s forks)
	test $(pgrep -f -- "gem-work -q --server https://localhost:[0-9]* .*$rk" | wc -l) -ge 2 &&
	kill -KILL $pid &&
	t0=$SECONDS && while pgrep -f $rk >/dev/null && [ $((SECONDS - t0)) -lt 60 ]; do sleep 0.5; done &&
	! pgrep -af $rk &&
	# the server stopped as a signal stops it: checkpointed
	tail -1 $rk/log.jsonl | grep -q "\"event\":\"stop\""
'

# farssh: an ssh to a host that sees this directory at ./far (its first two words logged): the
# paths of the command it runs are moved there, so the host does not see RUNDIR and gets copies.
test_expect_success 'GEM_SSH and --ssh: every connection and every copy goes through that command' '
	printf "#!/bin/sh\necho \"\$1 \$2\" >>\"%s/farssh.log\"\nwhile [ \$# -gt 0 ]; do case \$1 in -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;; -*) shift ;; *) break ;; esac; done\nshift\nexec sh -c \"\$(printf \"%%s\" \"\$*\" | sed \"s|%s/|%s/far/|g\")\"\n" \
		"$PWD" "$PWD" "$PWD" >farssh && chmod +x farssh && mkdir -p far &&
	printf "localhost\n127.0.0.1\n" >farhosts &&
	GEM_SSH="$PWD/farssh -p 2222" gem-run -q --rule sgp --hosts farhosts -n 2 --epochs 1 $TINY \
		--listen 0.0.0.0:0 run-far >far.tsv &&
	cat far.tsv && grep -q "^average" far.tsv &&
	# the run went out, the peer list too, and the node files came back
	test -f far/run-far/run.json && test -f far/run-far/peers &&
	test -f far/run-far/tls-cert.pem && test -f far/run-far/tls-key.pem &&
	test -f run-far/node-0.gem && test -f run-far/node-1.jsonl &&
	test $(grep -c -- "-p 2222" farssh.log) = $(wc -l <farssh.log) &&
	: >farssh.log &&
	gem-run -q --ssh "$PWD/farssh -o Port=2222" --hosts farhosts -n 2 --epochs 1 $TINY \
		--work-opt=--slowdown=20 run-far2 >far2.tsv &&
	grep -q "test_acc" far2.tsv && test -f far/run-far2/tls-cert.pem &&
	test $(grep -c -- "-o Port=2222" farssh.log) = $(wc -l <farssh.log)
'

test_done
