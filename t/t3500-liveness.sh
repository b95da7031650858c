#!/bin/bash
# t3500: a run that never hangs, survives its workers and resumes exactly: dead and late
# workers, sync without a dead worker, bounded staleness, dropped commits, the idle timeout,
# and a resume through the server that is bit for bit the run left alone.
. "$(dirname "$0")/test-lib.sh"

updates() { grep -vc '"event"' "$1/log.jsonl"; }
version_of() { head -1 "$1/params.gem" | sed -n 's/.*"version":\([0-9]*\).*/\1/p'; }

test_expect_success 'setup' 'make_tiny_data data'

test_expect_success 'a worker killed mid-run: the others finish and the dead one is named gone' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --workers 4 dead &&
	start_server dead --worker-timeout 1 &&
	for i in 1 2 3; do gem-work -q --server "$URL" --steps 60 & done &&
	{ gem-work -q --server "$URL" --steps 60 --die-after 10 2>die.err; echo $? >die.rc; } &&
	test "$(cat die.rc)" = 137 && wait_exit $SERVER_PID &&
	grep "\"event\":\"gone\"" dead/log.jsonl &&
	test "$(updates dead)" = $((3 * 60 + 10))
'

# --keep-running: on a loaded machine the first worker may finish before the late one has
# started, which must still find the server
test_expect_success 'a worker joins after 100 updates and its commits are applied' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 late &&
	start_server late --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	{ gem-work -q --server "$URL" --steps 300 --slowdown 20 & first=$!; } &&
	for i in $(seq 1200); do [ "$(updates late)" -ge 100 ] && break; sleep 0.05; done &&
	gem-work -q --server "$URL" --steps 20 && wait $first && stop_server &&
	python3 -c "
import json
lines=[json.loads(l) for l in open(\"late/log.jsonl\")]
joins=[l for l in lines if l.get(\"event\")==\"join\"]
assert len(joins)==2 and joins[1][\"version\"]>=100, joins
assert sum(1 for l in lines if \"event\" not in l and l[\"worker\"]==joins[1][\"worker\"])==20"
'

test_expect_success 'sync with one worker killed does not hang' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --rule sync --workers 3 sync &&
	start_server sync --worker-timeout 1 &&
	for i in 1 2; do gem-work -q --server "$URL" --steps 40 & done &&
	{ gem-work -q --server "$URL" --steps 40 --die-after 5 2>/dev/null; true; } &&
	for i in $(seq 150); do kill -0 $SERVER_PID 2>/dev/null || break; sleep 0.1; done &&
	wait_exit $SERVER_PID &&
	grep -q "\"event\":\"gone\"" sync/log.jsonl && test "$(version_of sync)" = 40
'

test_expect_success 'the server does not wait forever for commits: --idle-timeout exits 1' '
	gem-init -q --model tiny.json --data data idle &&
	start_server idle --idle-timeout 1 &&
	{ wait_exit $SERVER_PID; echo $? >rc; } && test "$(cat rc)" = 1 &&
	grep -q "idle-timeout" idle/serve.err && test -f idle/params.gem && test ! -e idle/server.url
'

test_expect_success '--max-staleness 0 refuses stale commits; the workers recompute and finish' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 stale &&
	start_server stale --max-staleness 0 --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	pids= && for i in 1 2 3; do gem-work -q --server "$URL" --steps 30 & pids="$pids $!"; done &&
	wait $pids &&
	curl -sf "$URL/v1/stats" >stats.json && stop_server &&
	python3 -c "
import json
s=json.load(open(\"stats.json\")); refused=sum(w[\"refused\"] for w in s[\"workers\"])
ups=[json.loads(l) for l in open(\"stale/log.jsonl\") if \"event\" not in l]
assert all(u[\"tau\"]==0 for u in ups), \"a stale commit was applied\"
assert len(ups)+refused==90 and s[\"version\"]==len(ups), (len(ups), refused, s[\"version\"])
print(\"applied\", len(ups), \"refused\", refused)"
'

test_expect_success '--drop-rate: dropped commits are retried, none is lost or applied twice' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --workers 2 drop &&
	start_server drop --drop-rate 0.3 &&
	pids= && for i in 1 2; do gem-work -q --server "$URL" --steps 40 & pids="$pids $!"; done &&
	wait $pids && wait_exit $SERVER_PID &&
	test "$(version_of drop)" = 80 &&
	test "$(grep -c "\"reason\":\"busy\"" drop/log.jsonl)" -gt 5
'

test_expect_success 'a straggler is named in /v1/stats' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 slow &&
	start_server slow --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	pids= && for i in 1 2 3; do gem-work -q --server "$URL" --steps 60 & pids="$pids $!"; done &&
	gem-work -q --server "$URL" --steps 20 --slowdown 100 --worker-id 9 &&
	wait $pids && curl -sf "$URL/v1/stats" >stats.json && stop_server &&
	python3 -c "
import json
w=json.load(open(\"stats.json\"))[\"workers\"]
slowest=min(w, key=lambda x: x[\"samples_per_s\"])
assert slowest[\"worker\"]==9, w"
'

test_expect_success 'resumed through the server, a run is bit for bit the run left alone' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --seed 4 whole &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 32 --seed 4 parts &&
	start_server whole && gem-work -q --server "$URL" --steps 100 && wait_exit $SERVER_PID &&
	start_server parts --max-updates 40 &&
	{ gem-work -q --server "$URL" --steps 100 2>err; test $? = 1; } && cat err &&
	wait_exit $SERVER_PID && test "$(version_of parts)" = 40 &&
	start_server parts && gem-work -q --server "$URL" --steps 60 --worker-id 0 && wait_exit $SERVER_PID &&
	test "$(version_of parts)" = 100 &&
	tail -c +$(( $(head -1 whole/params.gem | wc -c) + 1 )) whole/params.gem >w.blob &&
	tail -c +$(( $(head -1 parts/params.gem | wc -c) + 1 )) parts/params.gem >p.blob &&
	cmp w.blob p.blob
'
test_done
