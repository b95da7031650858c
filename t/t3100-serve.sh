#!/bin/bash
# t3100: gem-serve and gem-work over HTTP on a tiny model: join, commit, stats, stop, the log.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --workers 2 run
'

test_expect_success 'gem-serve listens on a free port and writes server.url' '
	start_server run &&
	grep -q "^http://127.0.0.1:[0-9]*$" run/server.url &&
	test "$(cat run/serve.out)" = "$URL" &&
	curl -sf "$URL/v1/health" | grep -q "\"ok\": *true"
'

test_expect_success 'GET /v1/run gives run.json and /v1/params a message' '
	curl -sf "$URL/v1/run" | grep -q "\"model_name\": *\"tiny\"" &&
	curl -sf "$URL/v1/params" | head -1 | python3 -c "
import json,sys; h=json.load(sys.stdin)
assert h[\"version\"]==0 and h[\"blobs\"][0][\"count\"]==1108, h"
'

test_expect_success 'two workers train 30 steps each' '
	gem-work -q --server "$URL" --steps 30 &
	w1=$!
	gem-work -q --server "$URL" --steps 30 &&
	wait $w1 &&
	python3 -c "
import json, collections
ups=[json.loads(l) for l in open(\"run/log.jsonl\") if \"event\" not in l]
c=collections.Counter(u[\"worker\"] for u in ups); assert sorted(c.values())==[30,30], c"
'

test_expect_success 'the log has one line per commit with τ and π' '
	grep -c "\"version\"" run/log.jsonl >/dev/null &&
	python3 -c "
import json
lines=[json.loads(l) for l in open(\"run/log.jsonl\")]
ups=[l for l in lines if \"event\" not in l]
assert len(ups)==60, len(ups)
assert [u[\"version\"] for u in ups]==list(range(1,61))
assert all(len(u[\"pi\"][\"median\"])==4 and 0<=u[\"scale\"]<=5 for u in ups)
last={}
for l in lines:
    if l.get(\"event\")==\"join\": last[l[\"worker\"]]=l[\"version\"]
    elif \"event\" not in l:
        w=l[\"worker\"]; assert l[\"tau\"]==l[\"version\"]-1-last[w], (l, last[w]); last[w]=l[\"version\"]
ev=[l[\"event\"] for l in lines if \"event\" in l]
assert ev[0]==\"start\" and ev.count(\"join\")==2 and ev.count(\"leave\")==2, ev"
'

test_expect_success 'the server stops by itself once every worker has finished' '
	for i in $(seq 50); do kill -0 $SERVER_PID 2>/dev/null || break; sleep 0.1; done &&
	! kill -0 $SERVER_PID 2>/dev/null && wait_exit $SERVER_PID &&
	test ! -e run/server.url &&
	head -1 run/params.gem | grep -q "\"version\":60"
'

test_expect_success '/v1/stats names every worker with its counters' '
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 5 &&
	curl -sf "$URL/v1/stats" >stats.json && stop_server &&
	python3 -c "
import json; s=json.load(open(\"stats.json\"))
assert s[\"version\"]==65 and s[\"rule\"]==\"gem\", s
w={x[\"worker\"]: x for x in s[\"workers\"]}
assert w[0][\"commits\"]==30 and w[2][\"commits\"]==5 and not w[2][\"active\"] and w[2][\"done\"], w
assert all(k in w[2] for k in (\"samples_per_s\",\"tau_mean\",\"tau_max\",\"refused\",\"since_contact\")), w"
'

test_expect_success 'a restarted server resumes at the checkpointed version' '
	start_server run &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	curl -sf "$URL/v1/health" | grep -q "\"version\": *65" &&
	stop_server && grep -q "\"event\":\"stop\"" run/log.jsonl
'

test_expect_success 'a second server on the same run is refused (exit 2, naming the first)' '
	start_server run &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-serve --listen 127.0.0.1:0 run 2>err; rc=$?; } && cat err && test $rc = 2 &&
	grep -q "run: the run is in use by pid $SERVER_PID (gem-serve at $URL)" err &&
	stop_server
'

test_expect_success '--max-updates stops the run; the worker, its steps not done, exits 1' '
	start_server run --max-updates 80 &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-work -q --server "$URL" --steps 1000 2>err; rc=$?; } && cat err && test $rc = 1 &&
	grep -q "the server ended the run after [0-9]* of the 1000 steps asked for" err &&
	wait_exit $SERVER_PID &&
	head -1 run/params.gem | grep -q "\"version\":80"
'

test_expect_code 2 'gem-serve refuses a public address without --public' 'gem-serve --listen 0.0.0.0:0 run'
test_expect_code 2 'gem-serve without RUNDIR' 'gem-serve'

test_expect_success 'a worker gives up on an unreachable server after --retry-for' '
	! gem-work -q --server http://127.0.0.1:1 --retry-for 1 2>err &&
	grep -q "unreachable" err
'
test_done
