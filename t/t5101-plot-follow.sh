#!/bin/bash
# t5101: gem-plot-data --follow prints the script again as the logs grow and ends by itself
# when the runs end: a server's stop event, a local training's end (its lock's pid gone), SGP
# node logs past their iterations.
. "$(dirname "$0")/test-lib.sh"

# frames FILE: how many scripts --follow printed.
frames() { grep -c "^# gem-plot-data " "$1"; }

# last_version FILE: the last version of the data of the last script in FILE.
last_version() { awk -F"\t" '/^EOD$/ { v = last } /^[0-9]/ { last = $1 } END { print v }' "$1"; }

test_expect_success 'setup: a tiny run' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 run
'

test_expect_success 'a server run: a script per growth of the log, the end at the stop event' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 10 &&
	{ timeout 60 gem-plot-data --follow --interval 0.05 -T dumb loss run >f.gp 2>f.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test \"\$(last_version f.gp)\" = 10" &&
	gem-work -q --server "$URL" --steps 10 &&
	wait_until "test \"\$(last_version f.gp)\" = 20" &&
	kill -0 $fpid &&
	stop_server &&
	wait $fpid &&
	test "$(frames f.gp)" -ge 2 && ! test -s f.err &&
	gnuplot f.gp >f.txt 2>gperr && ! grep -i error gperr && grep -q "+---" f.txt
'

test_expect_success 'a finished run is shown once' '
	timeout 20 gem-plot-data --follow -T dumb loss run >once.gp &&
	test "$(frames once.gp)" = 1
'

test_expect_success 'a local training: followed until its process ends' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 loc &&
	{ gem-work -q --local loc --steps 300 --slowdown 20 & } &&
	wpid=$! && test_bg $wpid &&
	wait_until "grep -q \"\\\"version\\\":1,\" loc/log.jsonl 2>/dev/null" &&
	timeout 60 gem-plot-data --follow --interval 0.05 --gnuplot --x seconds loss loc >l.gp &&
	! kill -0 $wpid 2>/dev/null &&
	test "$(last_version l.gp)" != "" &&
	grep -q "^# run: local$" l.gp &&
	tail -2 loc/log.jsonl | grep -q "\"version\":300," &&
	awk -F"\t" "/^[0-9]/ { v = \$2 } END { exit v != 300 }" l.gp
'

test_expect_success 'SGP node logs: followed until every node has done its iterations' '
	mkdir -p sgp && cp run/run.json sgp/ &&
	for i in 0 1; do
		{
			echo "{\"event\":\"start\",\"time\":1,\"rule\":\"sgp\",\"tensors\":[\"a\"]}"
			echo "{\"event\":\"sgp\",\"node\":$i,\"nodes\":2,\"iters\":2}"
			echo "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":$i,\"tau\":0,\"loss\":1,\"samples\":8}"
		} >sgp/node-$i.jsonl
	done &&
	{ timeout 60 gem-plot-data --follow --interval 0.05 -T dumb workers sgp >s.gp 2>s.err & } &&
	fpid=$! && test_bg $fpid &&
	wait_until "test \"\$(frames s.gp)\" = 1" &&
	echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16}" >>sgp/node-0.jsonl &&
	wait_until "test \"\$(frames s.gp)\" = 2" &&
	kill -0 $fpid &&
	printf "{\"time\":1,\"elapsed\":2,\"version\":2," >>sgp/node-1.jsonl &&
	echo "\"worker\":1,\"tau\":0,\"loss\":1,\"samples\":16}" >>sgp/node-1.jsonl &&
	wait $fpid && test "$(frames s.gp)" = 3 && ! test -s s.err
'

test_expect_code 1 'a log that is not there and no run trained: exit 1' '
	mkdir -p none && timeout 20 gem-plot-data --follow -T dumb loss none'
test_expect_success 'a run not made yet: waited for (--retry-for), then followed to its end' '
	{ timeout 60 gem-plot-data --follow --interval 0.05 -T dumb loss later >l.gp 2>l.err & } &&
	lpid=$! && test_bg $lpid &&
	wait_until "grep -q \"waiting for later (retrying for 10 s)\" l.err" &&
	gem-run -q -n 1 --steps 20 --work-opt=--slowdown=50 --model tiny.json --data data later >/dev/null &&
	wait $lpid && cat l.err && test "$(last_version l.gp)" = 20 &&
	{ gem-plot-data --follow --retry-for 0.2 -T dumb loss never 2>err; test $? = 1; } &&
	grep -q "^gem-plot-data: never: no log after 0.2 s" err
'

test_done
