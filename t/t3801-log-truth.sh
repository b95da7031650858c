#!/bin/bash
# t3801: the log tells the truth. A run restarted from its checkpoint (after kill -9 of
# gem-work --local, or of gem-serve) cuts log.jsonl back to the checkpoint's version: no
# version is logged twice, no torn line stays, the log ends where params.gem is. And a server
# with no worker joined is not training: its idle time is not counted in "elapsed".
. "$(dirname "$0")/test-lib.sh"

# check_log RUNDIR: every line of the log is whole JSON; the update lines' versions go up by
# one from the first to the last, which is params.gem's version.
check_log() {
	python3 - "$1" <<'PY'
import json, re, sys
d = sys.argv[1]
head = open(f"{d}/params.gem", "rb").readline().decode()
want = json.loads(head)["version"]
vs = []
for n, line in enumerate(open(f"{d}/log.jsonl"), 1):
    assert line.endswith("\n"), f"line {n} torn: {line!r}"
    o = json.loads(line)
    if "event" not in o:
        vs.append(o["version"])
dup = [v for a, v in zip(vs, vs[1:]) if v <= a]
assert not dup, f"versions logged twice or going back: {dup[:5]}"
assert vs == list(range(vs[0], vs[0] + len(vs))), "a version missing"
assert vs[-1] == want, f"the log ends at {vs[-1]}, params.gem at {want}"
print(f"{len(vs)} updates, {vs[0]}..{vs[-1]}")
PY
}

# version_of RUNDIR: params.gem's version; log_last RUNDIR: the last whole update's version.
version_of() { head -1 "$1/params.gem" | sed -n 's/.*"version":\([0-9]*\).*/\1/p'; }
log_last() {
	[ -f "$1/log.jsonl" ] || return 1
	sed -n '/^{"time".*}$/s/.*"version":\([0-9]*\).*/\1/p' "$1/log.jsonl" | tail -1
}

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 --epochs 300 run
'

# crash_local RUNDIR: gem-work --local on RUNDIR killed -9 while its log holds updates its
# checkpoint does not (the crash loses them); a checkpoint may land between the look and the
# kill, then it tries again. The run's budget is 300 epochs so that it outlasts a few
# checkpoints: 30 took about as long as the first checkpoint on a quiet machine, and the
# kill's window was a race. (Its log is flushed when stdio's buffer fills, so steps must be
# fast enough to fill it between two checkpoints: more slowdown fails under TSAN.)
crash_local() {
	for _try in 1 2 3 4 5; do
		gem-work -q --local "$1" --checkpoint-every 1 --slowdown 30 &
		_pid=$!
		test_bg $_pid
		_i=0
		until _v=$(version_of "$1") && _l=$(log_last "$1") && [ "${_v:-0}" -gt 0 ] &&
			[ "${_l:-0}" -gt "$_v" ]; do
			_i=$((_i + 1))
			[ $_i -lt 600 ] && sleep 0.05 || break
		done
		kill -9 $_pid
		wait $_pid
		_v=$(version_of "$1") && _l=$(log_last "$1") &&
		echo "killed: params.gem at $_v, the log at $_l" &&
		[ "$_l" -gt "$_v" ] && return 0
	done
	return 1
}

test_expect_success 'kill -9 of gem-work --local, a restart: the log is cut back' '
	crash_local run &&
	gem-work -q --local run --epochs 1 &&
	check_log run
'

test_expect_success 'a torn last line and later versions in the middle go; the rest stays' '
	v=$(version_of run) &&
	cp run/log.jsonl before.jsonl &&
	echo "{\"event\":\"join\",\"time\":1,\"worker\":0,\"version\":$((v + 5))}" >>run/log.jsonl &&
	echo "{\"event\":\"note\",\"time\":2}" >>run/log.jsonl &&
	echo "{\"time\":3,\"elapsed\":1,\"version\":$((v + 1)),\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":9}" >>run/log.jsonl &&
	printf "{\"time\":4,\"elapsed\":1,\"vers" >>run/log.jsonl &&
	gem-work -q --local run --steps 3 &&
	check_log run &&
	grep -q "{\"event\":\"note\",\"time\":2}" run/log.jsonl &&
	! grep -q "\"time\":3," run/log.jsonl &&
	! grep -q "\"time\":1,\"worker\"" run/log.jsonl
'

test_expect_success 'gem-serve killed -9 and restarted: its log is cut back too' '
	v=$(version_of run) &&
	echo "{\"time\":5,\"elapsed\":1,\"version\":$((v + 1)),\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":9}" >>run/log.jsonl &&
	start_server run &&
	gem-work -q --server "$URL" --steps 5 &&
	wait_exit $SERVER_PID &&
	check_log run &&
	grep -q "cut back to the checkpoint (version $v)" run/serve.err
'

# elapsed_check RUNDIR E0: the last session (from its last "start" event) counted as training
# time at most the time from its first join to its last leave: params.gem's elapsed is at most
# E0 + that, and so is every update line's.
elapsed_check() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d, e0 = sys.argv[1], float(sys.argv[2])
lines = [json.loads(l) for l in open(f"{d}/log.jsonl")]
start = max(i for i, o in enumerate(lines) if o.get("event") == "start")
sess = lines[start:]
join = min(o["time"] for o in sess if o.get("event") == "join")
leave = max(o["time"] for o in sess if o.get("event") == "leave")
final = json.loads(open(f"{d}/params.gem", "rb").readline().decode())["elapsed"]
ups = [o for o in sess if "event" not in o]
print(f"server up {sess[0]['time']:.3f}, first join {join:.3f}, last leave {leave:.3f}; elapsed {e0:.3f} -> {final:.3f}")
assert join - sess[0]["time"] >= 1, "the server was not idle long enough for the test to mean anything"
assert final <= e0 + (leave - join) + 0.01, "idle time counted as training time"
assert final >= e0 + (ups[-1]["time"] - join) - 0.01, "training time lost"
for o in ups:
    assert o["elapsed"] <= e0 + (o["time"] - join) + 0.01, f"update {o['version']}: idle time counted"
PY
}

test_expect_success 'a server with no worker for a while: that time is not training time' '
	gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 idle &&
	start_server idle &&
	# the idle time under test, not a wait for a state (elapsed_check asserts it was >= 1 s)
	sleep 1.2 &&
	gem-work -q --server "$URL" --steps 10 &&
	wait_exit $SERVER_PID &&
	elapsed_check idle 0 &&
	e1=$(head -1 idle/params.gem | sed -n "s/.*\"elapsed\":\([0-9.e+-]*\).*/\1/p") &&
	start_server idle &&
	# the idle time under test, not a wait for a state (elapsed_check asserts it was >= 1 s)
	sleep 1.2 &&
	gem-work -q --server "$URL" --steps 10 &&
	wait_exit $SERVER_PID &&
	elapsed_check idle "$e1"
'
test_done
