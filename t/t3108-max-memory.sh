#!/bin/bash
# t3108: gem-serve counts the memory of its rule's state and of its workers' buffers, in
# GET /v1/health and its summary line (GEM: m_w and s_w, 2·4·|θ| bytes a worker; a worker of
# int8 a copy of θ more); --max-memory refuses with a 503 and a message the join that would pass
# it, and a worker so refused fails with that message, while a worker whose state the server
# keeps joins again.
. "$(dirname "$0")/test-lib.sh"

init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 "$@"; }
# mem FIELD: that field of GET /v1/health's "memory"
mem() {
	curl -sf "$URL/v1/health" | python3 -c "import json, sys; print(json.load(sys.stdin)[\"memory\"][\"$1\"])"
}
join() { curl -s -o "$1" -w "%{http_code}" -X POST -d "$2" "$URL/v1/join"; }

# tiny's θ is 1,108 floats: 4,432 bytes
test_expect_success 'setup' '
	make_tiny_data data && init run
'

test_expect_success 'a GEM worker adds m_w and s_w to the rule state, an int8 one a copy of θ' '
	start_server run --keep-running --worker-timeout 0 &&
	r0=$(mem rule) && c0=$(mem copies) && echo "rule $r0, copies $c0" &&
	test $(join j0 "{\"codec\":\"raw\"}") = 200 &&
	r1=$(mem rule) && test $((r1 - r0)) = 8864 && test $(mem copies) = $c0 &&
	test $(join j1 "{\"codec\":\"int8\"}") = 200 &&
	r2=$(mem rule) && test $((r2 - r1)) = 8864 && test $(($(mem copies) - c0)) = 4432 &&
	test $(($(mem rule) + $(mem copies) + $(mem buffers))) = $(mem total) &&
	test $(mem max) = 0
'

test_expect_success 'the summary line gives the state and its peak' '
	stop_server && cat run/serve.err &&
	grep -q "rule state [0-9.]* KiB, [0-9.]* KiB with copies and buffers (peak [0-9.]* KiB)" run/serve.err
'

# at the start 5 vectors of θ (θ, a commit's spare, m_w'"'"'s spare, 2 of scratch): 22,160
# bytes; each raw worker 8,864 of rule state and 8,528 of reply buffer (4,096 + θ)
test_expect_success '--max-memory: the join past it gets a 503 that says why' '
	init cap && start_server cap --keep-running --worker-timeout 0 --max-memory 72000 &&
	test $(mem total) = 22160 &&
	test $(join a "{\"codec\":\"raw\"}") = 200 && test $(join b "{\"codec\":\"raw\"}") = 200 &&
	test $(mem rule) = 39888 && total=$(mem total) && echo "total $total" &&
	test $total -gt $((39888 + 2 * 8528)) && test $total -le 72000 && test $((total + 17392)) -gt 72000 && test $(mem max) = 72000 &&
	test $(join c "{\"codec\":\"raw\"}") = 503 && cat c && echo &&
	grep -q "\"full\"" c &&
	grep -q "joining a new worker needs 17.0 KiB more of rule state; the server'"'"'s --max-memory is 70.3 KiB ([0-9.]* KiB in use)" c &&
	test $(mem total) = $total
'

test_expect_success 'a worker whose state the server keeps joins again' '
	test $(join again "{\"worker\":0,\"codec\":\"raw\"}") = 200
'

test_expect_success 'a worker refused for memory fails with the message, exit 1' '
	{ gem-work --server "$URL" --steps 5 --retry-for 0.5 2>work.err; echo $? >rc; } &&
	test $(cat rc) = 1 &&
	cat work.err &&
	grep -q "more of rule state; the server'"'"'s --max-memory is 70.3 KiB" work.err
'

test_expect_success 'a worker that leaves makes room for another' '
	curl -sf -X POST -d "{\"worker\":1}" "$URL/v1/leave" >/dev/null &&
	test $(join d "{\"codec\":\"raw\"}") = 200
'

test_expect_success '--max-memory takes sizes with suffixes, and refuses others' '
	gem-serve --check --max-memory 512M &&
	gem-serve --check --max-memory 2GiB &&
	gem-serve --check --max-memory 65536 &&
	for bad in 0 12X -1 1.5G 99999999999T ""; do
		{ gem-serve --check --max-memory "$bad" 2>err; echo $? >rc; } && cat err &&
		test $(cat rc) = 2 &&
		grep -q "^gem-serve: --max-memory: not a size" err || return 1
	done
'
test_done
