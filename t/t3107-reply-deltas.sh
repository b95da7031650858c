#!/bin/bash
# t3107: θ replies to a worker of int8, int4 or topk are deltas from the copy of θ it holds
# (wire/delta): after 1,000 commits of an int4 worker its copy is still the server's bit for bit
# (the CRC-32 of both, compared at every reply and at the end), and the run trains; a reply
# moves fewer bytes than θ in fp16; a join and a resent commit get θ whole; raw and fp16 workers,
# and any worker of a server given --codec, get θ whole as before; gem-sim --replay of the run
# ends with its θ.
. "$(dirname "$0")/test-lib.sh"

init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 "$@"; }
msg() { python3 "$GEM_SRC/t/gem-msg.py" --count 1108 --value 0.001 "$@"; }
# reply FILE: the blob's name and codec, and the header's copy_crc32 (- when none)
reply() {
	head -1 "$1" | python3 -c 'import json, sys; h = json.load(sys.stdin); b = h["blobs"][0]
print(b["name"], b["codec"], h.get("copy_crc32", "-"))'
}

test_expect_success 'setup' '
	make_tiny_data data
'

test_expect_success '1,000 commits of an int4 worker: its copy is the server'"'"'s, the run trains' '
	init run && start_server run &&
	GEM_LOG=debug gem-work --server "$URL" --steps 1000 --codec int4 2>work.err &&
	wait_exit $SERVER_PID && cat work.err &&
	grep -q "slice 0: 1000 replies as deltas; the copy'"'"'s CRC-32 \([0-9a-f]*\), the server'"'"'s last \1$" work.err &&
	! grep -q "not the server" work.err &&
	test $(grep -c "\"event\":\"join\"" run/log.jsonl) = 1 &&
	gem-eval run >eval.tsv && cat eval.tsv &&
	awk "!/^#/ { found = 1; ok = \$4 < 0.2 && \$5 > 0.9 } END { exit !(found && ok) }" eval.tsv
'

# tiny's θ is 1,108 floats: 2,216 bytes in fp16, 574 in int4 (5 scales and 554 bytes)
test_expect_success 'a reply to the int4 worker is smaller than θ in fp16' '
	python3 -c "import json, sys
out = sum(json.loads(l).get(\"bytes_out\", 0) for l in open(\"run/log.jsonl\"))
print(out, \"bytes out for 1,001 replies\")
assert 574 * 1001 < out < 2216 * 1001" 
'

test_expect_success 'gem-sim --replay of the run ends with its θ' '
	gem-sim -q --replay run/log.jsonl again >/dev/null &&
	tail -n +2 run/params.gem >a.blob && tail -n +2 again/params.gem >b.blob && cmp a.blob b.blob
'

test_expect_success 'a join gets θ whole, a commit a delta, the same commit resent θ whole' '
	init srv && start_server srv --keep-running --worker-timeout 0 &&
	curl -sf -X POST -d "{\"codec\":\"int8\"}" "$URL/v1/join" >join.msg &&
	reply join.msg >r && cat r && grep -q "^params fp16 [0-9]" r &&
	msg --worker 0 --seq 1 --codec int8 >m &&
	curl -sf -o first.msg -X POST --data-binary @m "$URL/v1/commit" &&
	reply first.msg >r && cat r && grep -q "^delta int8 [0-9]" r &&
	curl -sf -o again.msg -X POST --data-binary @m "$URL/v1/commit" &&
	reply again.msg >r && cat r && grep -q "^params fp16 [0-9]" r &&
	msg --worker 0 --seq 2 --codec int8 >m &&
	curl -sf -o next.msg -X POST --data-binary @m "$URL/v1/commit" &&
	reply next.msg >r && cat r && grep -q "^delta int8 [0-9]" r
'

test_expect_success 'raw and fp16 workers get θ whole in their codec, with no copy kept' '
	for c in raw fp16; do
		id=$(curl -sf -X POST -d "{\"codec\":\"$c\"}" "$URL/v1/join" | head -1 |
		     python3 -c "import json, sys; print(json.load(sys.stdin)[\"worker\"])") &&
		msg --worker $id --seq 1 --codec $c >m &&
		curl -sf -o c.msg -X POST --data-binary @m "$URL/v1/commit" &&
		reply c.msg >r && cat r && grep -q "^params $c -$" r || return 1
	done
'

test_expect_success 'a server given --codec fp16 sends an int4 worker θ whole' '
	init fixed && start_server fixed --codec fp16 &&
	GEM_LOG=debug gem-work --server "$URL" --steps 20 --codec int4 2>work.err &&
	wait_exit $SERVER_PID &&
	grep -q "slice 0: 0 replies as deltas" work.err
'
test_done
