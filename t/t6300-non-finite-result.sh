#!/bin/bash
# t6300: a finite commit that would make θ or the rule's state non-finite is refused (400
# non_finite_result, logged as refused), leaves θ, its version and the checkpoint as they were,
# and the run goes on (two commits of all FLT_MAX overflow GEM's momentum).
. "$(dirname "$0")/test-lib.sh"
FLT_MAX=3.4028234663852886e38
msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 "$@"; }

# finite_params FILE: the raw params message FILE holds 1108 finite floats; prints their sum.
finite_params() {
	python3 - "$1" <<'PY'
import json, math, struct, sys
b = open(sys.argv[1], "rb").read(); nl = b.index(b"\n"); h = json.loads(b[:nl])
v = struct.unpack("<%df" % h["blobs"][0]["count"], b[nl + 1:nl + 1 + h["blobs"][0]["size"]])
assert len(v) == 1108 and all(math.isfinite(x) for x in v), "not finite"
print(sum(v))
PY
}

for rule in gem downpour; do
	test_expect_success "$rule: setup, one worker joined" "
		make_tiny_data data &&
		rm -rf $rule && gem-init -q --model tiny.json --data data --rule $rule $rule &&
		start_server $rule &&
		curl -sf -X POST -d '{}' \$URL/v1/join | head -1 | grep -q '\"worker\":0'
	"
	test_expect_success "$rule: a commit of all FLT_MAX is applied, θ stays finite" "
		msg --value $FLT_MAX --seq 1 >m1 &&
		curl -sf -X POST --data-binary @m1 \$URL/v1/commit >/dev/null &&
		curl -sf \"\$URL/v1/params?codec=raw\" >after1.msg &&
		finite_params after1.msg
	"
	test_expect_success "$rule: a second one would overflow: 400 non_finite_result" "
		msg --value $FLT_MAX --base 1 --seq 2 >m2 &&
		expect_error 400 non_finite_result -X POST --data-binary @m2 \$URL/v1/commit &&
		curl -sf \$URL/v1/health | grep -q '\"version\": *1\\b'
	"
	test_expect_success "$rule: θ as it was" "
		curl -sf \"\$URL/v1/params?codec=raw\" >after2.msg &&
		tail -n +2 after1.msg >theta1 && tail -n +2 after2.msg >theta2 &&
		cmp theta1 theta2
	"
	test_expect_success "$rule: honest commits go on; the refusal logged with its reason; the checkpoint resumes finite" "
		msg --value -0.001 --base 1 --seq 3 >m3 &&
		curl -sf -X POST --data-binary @m3 \$URL/v1/commit >/dev/null &&
		curl -sf \$URL/v1/health | grep -q '\"version\": *2\\b' &&
		stop_if_running \$SERVER_PID &&
		grep '\"event\":\"refused\"' $rule/log.jsonl | grep -q '\"reason\":\"non_finite_result\"' &&
		start_server $rule &&
		curl -sf \"\$URL/v1/params?codec=raw\" >resumed.msg &&
		finite_params resumed.msg &&
		stop_if_running \$SERVER_PID
	"
done

# Workers whose loss stops being finite give up ("diverged"); they say so when they leave, and
# once every worker has left the server ends the run as failed at once instead of waiting
# --idle-timeout (600 s) for them to come back.
test_expect_success 'diverging workers: the server ends the run, failed, when the last one leaves' '
	rm -rf div && gem-init -q --model tiny.json --data data --rule downpour --lr 1e6 \
		--workers 2 div &&
	start_server div --idle-timeout 600 &&
	{ gem-work -q --server div --steps 200 2>w0.err & w0=$!; } &&
	{ gem-work -q --server div --steps 200 2>w1.err & w1=$!; } &&
	test_bg "$w0 $w1" &&
	{ wait_exit $w0 60; s0=$?; } && { wait_exit $w1 60; s1=$?; } &&
	cat w0.err w1.err &&
	test $s0 = 1 && test $s1 = 1 && grep -q diverged w0.err && grep -q diverged w1.err &&
	{ wait_exit $SERVER_PID 20; s=$?; } &&
	cat div/serve.err && test $s = 1 &&
	grep -q "2 diverged" div/serve.err &&
	test $(grep "\"event\":\"leave\"" div/log.jsonl | grep -c "\"diverged\":true") = 2
'

test_expect_success 'a leave that says both done and diverged is a 400' '
	gem-init -q --model tiny.json --data data --rule downpour both &&
	start_server both --keep-running &&
	curl -sf -X POST -d "{}" $URL/v1/join >/dev/null &&
	got=$(curl -s -o reply.json -w "%{http_code}" -X POST \
		-d "{\"worker\":0,\"done\":true,\"diverged\":true}" $URL/v1/leave) &&
	test "$got" = 400 && grep -q bad_field reply.json &&
	got=$(curl -s -o reply.json -w "%{http_code}" -X POST \
		-d "{\"worker\":0,\"diverged\":1}" $URL/v1/leave) &&
	test "$got" = 400 &&
	stop_if_running $SERVER_PID
'

test_done
