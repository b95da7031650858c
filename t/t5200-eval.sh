#!/bin/bash
# t5200: gem-eval end to end on the tiny model: a server's URL evaluates like its run
# directory, the extra columns (--per-class, --train-subset), JSON lines, --follow of a live
# server until it stops or dies, unreachable servers and bad usage.
. "$(dirname "$0")/test-lib.sh"

# data_lines FILE: the lines of FILE that are not the header.
data_lines() { grep -vc "^#" "$1"; }

# man_has_option NAME: the man page documents --NAME (written \-\-NAME there).
man_has_option() {
	_m=$(printf '%s' "--$1" | sed 's/-/\\-/g')
	grep -qF -- "$_m" "$GEM_SRC/man/man1/gem-eval.1"
}

test_expect_success 'setup: a run trained 30 steps on a server that keeps running' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run &&
	start_server run --keep-running &&
	gem-work -q --server "$URL" --steps 30
'

test_expect_success 'a URL evaluates like the run directory once the server has stopped' '
	gem-eval "$URL" >url.tsv &&
	stop_server &&
	gem-eval run >dir.tsv &&
	head -1 url.tsv | grep -q "^# elapsed	version	samples	test_loss	test_acc	bytes$" &&
	test "$(wc -l <url.tsv)" = 2 &&
	awk "NR==2 { exit !(\$2 == 30 && \$3 == 960) }" url.tsv &&
	cut -f2-5 url.tsv >url.cols && cut -f2-5 dir.tsv >dir.cols && cmp url.cols dir.cols
'

test_expect_success 'bytes: every commit and reply of the log up to the version; nan by URL' '
	awk -F"\t" "NR==2 { exit !(\$6 == \"nan\") }" url.tsv &&
	sed -n "s/.*\"bytes_in\":\([0-9]*\),\"bytes_out\":\([0-9]*\).*/\1 \2/p" run/log.jsonl |
		awk "{ s += \$1 + \$2 } END { print s }" >want.bytes &&
	test "$(cat want.bytes)" -gt 0 &&
	awk -F"\t" "NR==2 { print \$6 }" dir.tsv >got.bytes && cmp want.bytes got.bytes
'

test_expect_success '--per-class adds acc_0..acc_3, whose mean weighted by class counts is test_acc' '
	gem-eval --per-class run >pc.tsv &&
	head -1 pc.tsv | grep -q "^# elapsed	version	samples	test_loss	test_acc	acc_0	acc_1	acc_2	acc_3	bytes$" &&
	python3 -c "
import collections
labels = open(\"data/t10k-labels-idx1-ubyte\", \"rb\").read()[8:]
n = collections.Counter(labels)
row = open(\"pc.tsv\").read().splitlines()[1].split(\"\t\")
acc, per = float(row[4]), [float(x) for x in row[5:9]]
assert len(per) == 4, row
mean = sum(per[k] * n[k] for k in range(4)) / len(labels)
assert abs(mean - acc) < 3e-4, (mean, acc)
"
'

test_expect_success '--train-subset adds a finite train_loss, the same on every call' '
	gem-eval --train-subset 300 run >ts1.tsv &&
	gem-eval --train-subset 300 run >ts2.tsv &&
	cmp ts1.tsv ts2.tsv &&
	head -1 ts1.tsv | grep -q "	test_acc	train_loss	bytes$" &&
	awk -F"\t" "NR==2 { exit !(NF == 7 && \$6 + 0 == \$6 && \$6 > 0 && \$6 < 10) }" ts1.tsv &&
	gem-eval --train-subset 100000 run | awk -F"\t" "NR==2 { exit !(NF == 7 && \$6 > 0) }"
'

test_expect_success 'the columns come in order: train_loss, then acc_k' '
	gem-eval --per-class --train-subset 50 run | head -1 |
		grep -q "^# elapsed	version	samples	test_loss	test_acc	train_loss	acc_0	acc_1	acc_2	acc_3	bytes$"
'

test_expect_success '--json prints one object per evaluation with the same fields' '
	gem-eval --json --per-class --train-subset 50 run >e.json &&
	python3 -c "
import json
lines = open(\"e.json\").read().splitlines()
assert len(lines) == 1, lines
r = json.loads(lines[0])
want = [\"elapsed\", \"version\", \"samples\", \"test_loss\", \"test_acc\", \"train_loss\",
        \"acc_0\", \"acc_1\", \"acc_2\", \"acc_3\", \"bytes\"]
assert list(r) == want and r[\"version\"] == 30, r
"
'

test_expect_success '--follow RUNDIR prints one line per version while a worker trains, exits 0 on stop' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-eval --follow run --interval 0.05 >fol.tsv 2>fol.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test -s fol.tsv" &&
	gem-work -q --server "$URL" --steps 15 --slowdown 1000 &&
	wait_until "tail -1 fol.tsv | grep -q \"^[0-9.]*	45	\"" &&
	stop_server &&
	wait $fpid &&
	test "$(grep -c "^#" fol.tsv)" = 1 && head -1 fol.tsv | grep -q "^# elapsed" &&
	test ! -s fol.err &&
	python3 -c "
v = [int(l.split()[1]) for l in open(\"fol.tsv\") if not l.startswith(\"#\")]
assert len(v) >= 4 and v[0] == 30 and v[-1] == 45, v
assert all(a < b for a, b in zip(v, v[1:])), v
"
'

test_expect_success '--follow of a RUNDIR ends with the final checkpoint when it is new' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-eval --follow run --interval 1 --json >fin.json 2>fin.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test -s fin.json" &&
	gem-work -q --server "$URL" --steps 5 &&
	stop_server &&
	wait $fpid &&
	python3 -c "
import json
v = [json.loads(l)[\"version\"] for l in open(\"fin.json\")]
assert v == [45, 50], v
"
'

# The worker is stopped (SIGSTOP) before the server is: a stopping server waits up to 3 s for
# its active workers, and that window, not a worker's commit racing the stop, is what this
# follow sees ("stopping": true). (The tests below cover a stop between polls: long polls, and
# the server waiting for a follower's next poll.)
test_expect_success '--follow URL exits 0 when the server said it was stopping' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-eval --follow "$URL" --interval 0.05 >fu.tsv 2>fu.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test -s fu.tsv" &&
	{ gem-work -q --server "$URL" --steps 1000 --slowdown 8000 & } &&
	wpid=$! && test_bg $wpid &&
	test_when_finished "kill -9 $wpid 2>/dev/null; true" &&
	wait_until "test \"\$(health_version)\" -gt 50" 120 &&
	kill -STOP $wpid &&
	stop_server &&
	wait $fpid &&
	test "$(data_lines fu.tsv)" -ge 2
'

test_expect_success 'GET /v1/health?wait=SEC is a long poll: a stop answers it; bad arguments are 400' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	for q in wait=-1 wait=nan wait=abc "wait=" version=x version=-1 "version=1e3"; do
		test "$(curl -s -o /dev/null -w "%{http_code}" "$URL/v1/health?$q")" = 400 || return 1
	done &&
	v=$(health_version) &&
	curl -s --max-time 20 "$URL/v1/health?wait=30&version=$((v + 1))" | grep -q "\"version\":$v," &&
	{ curl -s "$URL/v1/health?wait=30&version=$v" >lp.json & } && cpid=$! && test_bg $cpid &&
	wait_connected $cpid ${URL##*:} &&
	stop_server &&
	wait $cpid &&
	grep -q "\"stopping\":true" lp.json
'

# A follower busy evaluating when the run stops polls again right after: the server waits for
# that poll (5 s at most) so that it answers "stopping" instead of finding the port closed.
test_expect_success 'a stopping server waits for the next poll of a follower that polled lately' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	curl -sf "$URL/v1/health?wait=0" >/dev/null &&
	curl -s -X POST "$URL/v1/stop" >/dev/null &&
	# the wait under test: a second on, the server still waits for that poll (5 s at most)
	sleep 1 &&
	curl -sf "$URL/v1/health" | grep -q "\"stopping\":true" &&
	kill -0 $SERVER_PID &&
	curl -sf "$URL/v1/health?wait=0" | grep -q "\"stopping\":true" &&
	wait_exit $SERVER_PID 10
'

# The follow waits between its polls on the server (a long poll): it is connected when the run
# stops, however long its interval, and ends with 0, not "went away" after its --retry-for.
test_expect_success '--follow URL with a long interval sees a stop between two polls, exits 0' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-eval --follow "$URL" --interval 30 --retry-for 1 >fl.tsv 2>fl.err & } &&
	fpid=$! && test_bg $fpid &&
	# its first row, then its long poll on the server
	wait_until "test -s fl.tsv" && wait_connected $fpid ${URL##*:} &&
	stop_server &&
	wait_exit $fpid 20 &&
	test "$(data_lines fl.tsv)" = 1
'

# A server that answers a long poll at once (one that does not know ?wait) is not polled in a
# loop: the follow sees it and pauses by itself, --interval apart.
test_expect_success '--follow of a server without long polls pauses by itself' '
	start_fake_server --polls polls run/run.json run/params.gem &&
	test_when_finished "kill $FAKE_PID 2>/dev/null; true" &&
	{ gem-eval --follow "$FAKE_URL" --interval 1 --retry-for 1 \
		>ff.tsv 2>ff.err & } &&
	gpid=$! && test_bg $gpid &&
	# three seconds of polls at --interval 1 are counted: a duration, not a wait for a state
	wait_until "test -s ff.tsv" && sleep 3 &&
	echo "$(cat polls) polls" && test "$(cat polls)" -le 8 &&
	kill $FAKE_PID && { wait_exit $gpid 20; test $? = 1; } &&
	test "$(data_lines ff.tsv)" = 1
'

# A server that accepts the connection and never answers is away after --retry-for (and the
# long poll's wait), not after the minute a fetch of θ may take.
test_expect_success '--follow of a server that never answers gives up after --retry-for' '
	cat >mute.py <<-\PY &&
	import socket, time
	s = socket.socket()
	s.bind(("127.0.0.1", 0))
	s.listen(16)
	print(s.getsockname()[1], flush=True)
	held = []
	while True:
	    held.append(s.accept()[0])
	PY
	{ python3 -u mute.py >mute.out 2>mute.err & } &&
	mpid=$! && test_bg $mpid &&
	test_when_finished "kill $mpid 2>/dev/null; true" &&
	wait_until "test -s mute.out" &&
	{ timeout 40 gem-eval --follow "http://127.0.0.1:$(cat mute.out)" --retry-for 2 \
		>fm.tsv 2>fm.err; test $? = 1; } &&
	cat fm.err &&
	grep -q "unreachable for 2 s" fm.err && test ! -s fm.tsv
'

test_expect_success '--follow of a server killed with kill -9 exits 1 with a message' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-eval --follow "$URL" --interval 0.05 --retry-for 1 >fk.tsv 2>fk.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test -s fk.tsv" &&
	kill -9 $SERVER_PID && { wait $SERVER_PID; true; } &&
	{ wait $fpid; test $? = 1; } &&
	test "$(data_lines fk.tsv)" = 1 &&
	grep -q "went away without stopping" fk.err
'

test_expect_success '--follow RUNDIR of a killed server exits 1 too (server.url stays behind)' '
	test_when_finished "rm -f run/server.url" &&
	test -s run/server.url &&
	{ gem-eval --follow run --retry-for 0.5 >fk2.tsv 2>fk2.err; test $? = 1; } &&
	grep -q "unreachable" fk2.err
'

test_expect_success 'an unreachable server or a bad URL fails quickly with --retry-for 1' '
	start=$(date +%s) &&
	{ gem-eval --retry-for 1 http://127.0.0.1:1 >out 2>err; test $? = 1; } &&
	grep -q "unreachable" err && test ! -s out &&
	{ gem-eval --retry-for 0.3 --follow http://127.0.0.1:1 2>err; test $? = 1; } &&
	grep -q "unreachable" err &&
	{ gem-eval --retry-for 0.3 http://127.0.0.1:99999 2>err; test $? = 1; } &&
	{ gem-eval --retry-for 0.3 --follow run 2>err; test $? = 1; } && grep -q "no server" err &&
	# well under the default --retry-for of 60 s even on a loaded machine or a sanitizer build
	test $(( $(date +%s) - start )) -le 20
'

test_expect_success 'a URL that is not a gem server fails with 1' '
	{ python3 -u -m http.server --bind 127.0.0.1 0 >http.out 2>&1 & } &&
	hpid=$! && test_bg $hpid &&
	test_when_finished "kill $hpid" &&
	wait_until "grep -q \"port [0-9]\" http.out" &&
	port=$(sed -n "s/.*port \([0-9]*\).*/\1/p" http.out | head -1) &&
	{ gem-eval --retry-for 1 "http://127.0.0.1:$port" 2>err; test $? = 1; } &&
	{ gem-eval --retry-for 1 --follow "http://127.0.0.1:$port" 2>err2; test $? = 1; } &&
	cat err err2 && grep -q "404" err
'

test_expect_success 'corrupt parameters fail with 1 and name the file' '
	head -c 500 run/params.gem >run/bad.gem &&
	{ gem-eval run/bad.gem 2>err; test $? = 1; } && grep -q "bad.gem" err
'

test_expect_code 2 'an unknown option' 'gem-eval --bogus run'
test_expect_code 2 'no argument' 'gem-eval'
test_expect_success 'two arguments: one table with a run column' '
	gem-eval run run >two && head -1 two | grep -q "^# run	elapsed" && test "$(wc -l <two)" = 3'
test_expect_code 2 '--follow takes no other argument' 'gem-eval --follow run run'
test_expect_code 2 '--interval must be a positive number' 'gem-eval --follow run --interval 0'
test_expect_code 2 '--interval is a number' 'gem-eval --follow run --interval soon'
test_expect_code 2 '--retry-for is not negative' 'gem-eval --retry-for -1 run'
test_expect_code 2 '--train-subset is positive' 'gem-eval --train-subset 0 run'
test_expect_code 2 '--run does not go with a URL' 'gem-eval --run run http://127.0.0.1:1'
test_expect_code 2 '--run does not go with --follow' 'gem-eval --run run --follow run'
test_expect_code 2 'a directory that is not a run' 'mkdir -p empty && gem-eval empty'
test_expect_code 2 '--follow of a directory that is not a run' 'gem-eval --follow empty'
test_expect_code 2 'an unknown --data' 'gem-eval --data no-such-dataset run'

test_expect_success 'a path that is not there is named as given, not by its directory' '
	for p in nosuch nosuch/params.gem; do
		{ gem-eval $p 2>err; test $? = 2; } && cat err &&
		test "$(cat err)" = "gem-eval: $p: No such file or directory" || return 1
	done
'

test_expect_success '--follow (a flag, the run after it or before) of a RUNDIR not made yet: waited for' '
	gem-eval later --follow --interval 0.1 >later.tsv 2>later.err &
	pid=$! && test_bg $pid &&
	wait_until "grep -q \"waiting for later to be made (retrying for 10 s)\" later.err" &&
	gem-run -q -n 1 --steps 20 --work-opt=--slowdown=50 --model tiny.json --data data later >/dev/null &&
	wait_exit $pid && cat later.err later.tsv &&
	tail -1 later.tsv | awk "{ exit !(\$2 == 20) }"
'

# A run that trains and ends between two polls (here: while the follow is stopped) had its
# server come and go unseen: the moved checkpoint is its stop, not a server yet to start.
test_expect_success '--follow RUNDIR of a run trained and ended between two polls: its end' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 unseen &&
	{ gem-eval --follow unseen --interval 0.1 --retry-for 2 >unseen.tsv 2>unseen.err & } &&
	pid=$! && test_bg $pid &&
	sleep 0.5 && kill -STOP $pid &&
	gem-run -q --resume -n 1 --steps 20 unseen >/dev/null &&
	kill -CONT $pid &&
	wait_exit $pid && cat unseen.err unseen.tsv &&
	test "$(grep -vc "^#" unseen.tsv)" = 1 &&
	tail -1 unseen.tsv | awk "{ exit !(\$2 == 20) }"
'

test_expect_success '--help names every option, as the man page does' '
	gem-eval --help >help &&
	grep -q "^usage: gem-eval" help &&
	for o in run data train-subset per-class json follow interval retry-for help version; do
		grep -q -- "--$o " help && man_has_option $o ||
		{ echo "missing: --$o"; return 1; }
	done &&
	gem-eval --version | grep -q "^gem-eval "
'
test_done
