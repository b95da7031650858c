#!/bin/bash
# t6260: a checkpoint cannot lie. Every .gem file's header carries its checksum: one bit
# flipped in it ("version":30 made 31) is refused by every reader, the file named with the save
# before it (*.prev.gem), which the operator can take instead. An older gem's file, without
# the checksum, is still read, with a warning.
. "$(dirname "$0")/test-lib.sh"

# flip FILE OLD NEW: replace OLD by NEW (as long) once in FILE's first line, in place.
flip() {
	python3 - "$@" <<'PY'
import sys
path, old, new = sys.argv[1], sys.argv[2].encode(), sys.argv[3].encode()
data = open(path, "rb").read()
nl = data.index(b"\n")
i = data.index(old, 0, nl)
open(path, "r+b").write(data[:i] + new + data[i + len(old):])
PY
}

test_expect_success 'setup: a served run checkpointed at version 30' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 4 run &&
	start_server run --keep-running --checkpoint-every 0 &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	gem-work -q --server "$URL" --steps 20 &&
	curl -sf -X POST "$URL/v1/checkpoint" >/dev/null &&
	gem-work -q --server "$URL" --steps 10 &&
	stop_server &&
	head -1 run/params.gem | grep -q "\"version\":30," &&
	cp -p run/params.gem run/rule-state.gem .
'

test_expect_success 'each checkpoint file ends its header with its checksum; params.prev.gem' '
	head -1 run/params.prev.gem | grep -q "\"version\":20," &&
	head -1 run/rule-state.gem | grep -q "\"version\":30," &&
	for f in params params.prev rule-state rule-state.prev; do
		head -1 run/$f.gem | grep -q "\"head_crc32\":[0-9]*} *$" || return 1
	done
'

test_expect_success 'version 30 made 31 in params.gem: gem-serve refuses it, naming the save before' '
	flip run/params.gem "\"version\":30," "\"version\":31," &&
	{ gem-serve --listen 127.0.0.1:0 run 2>err; test $? = 1; } &&
	cat err &&
	grep -q "run/params.gem: the header is damaged" err &&
	grep -q "cp run/params.prev.gem run/params.gem" err &&
	test ! -e run/server.url
'

test_expect_success 'gem-eval refuses it too' '
	{ gem-eval run >out 2>err; test $? = 1; } &&
	grep -q "params.gem: the header is damaged" err && test ! -s out
'

test_expect_success 'the save before, put back as the operator is told, resumes the run' '
	cp run/params.prev.gem run/params.gem &&
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	grep -q "resumed the rule" run/serve.err &&
	test "$(health_version)" = 30 &&
	stop_server &&
	cp -p params.gem rule-state.gem run/
'

test_expect_success 'a damaged rule-state.gem is refused, naming its save before with θ'"'"'s' '
	flip run/rule-state.gem "\"version\":30," "\"version\":31," &&
	{ gem-serve --listen 127.0.0.1:0 run 2>err; test $? = 1; } &&
	cat err &&
	grep -q "run/rule-state.gem: the header is damaged" err &&
	grep -q "cp run/rule-state.prev.gem run/rule-state.gem && cp run/params.prev.gem run/params.gem)" err
'

test_expect_success 'done as told, the run resumes with the rule'"'"'s state' '
	cp run/rule-state.prev.gem run/rule-state.gem && cp run/params.prev.gem run/params.gem &&
	start_server run --keep-running &&
	test_when_finished "stop_if_running $SERVER_PID" &&
	grep -q "resumed the rule" run/serve.err && ! grep -q "afresh" run/serve.err &&
	stop_server &&
	cp -p params.gem rule-state.gem run/
'

test_expect_success 'a damaged local-state.gem is refused by gem-work --local' '
	gem-init -q --model tiny.json --data data --lr 0.05 --batch 16 --seed 4 loc &&
	gem-work -q --local loc --steps 12 &&
	head -1 loc/local-state.gem | grep -q "\"version\":12," &&
	flip loc/local-state.gem "\"version\":12," "\"version\":13," &&
	{ gem-work -q --local loc --steps 2 2>err; test $? = 1; } &&
	cat err && grep -q "loc/local-state.gem: the header is damaged" err &&
	head -1 loc/params.gem | grep -q "\"version\":12,"
'

test_expect_success 'a checksum that is not the header'"'"'s is refused' '
	cp -p params.gem run/bad.gem &&
	crc=$(head -1 run/bad.gem | sed -n "s/.*\"head_crc32\":\([0-9]*\)}.*/\1/p") &&
	flip run/bad.gem "\"head_crc32\":$crc" "\"head_crc32\":$(( (${crc:0:1} + 1) % 10 ))${crc:1}" &&
	{ gem-eval run/bad.gem 2>err; test $? = 1; } && cat err &&
	grep -q "bad.gem: the header is damaged" err
'

# What gems before the checksum wrote: the same header without the member, its line padded
# back to its length.
test_expect_success 'an older gem'"'"'s params.gem, without the checksum, is read with a warning' '
	python3 - <<-\PY &&
	data = open("params.gem", "rb").read()
	nl = data.index(b"\n")
	line = data[:nl].rstrip(b" ")
	cut = line.rindex(b",\"head_crc32\":")
	line = line[:cut] + b"}"
	open("run/old.gem", "wb").write(line.ljust(nl) + data[nl:])
	PY
	head -1 run/old.gem | grep -q "\]} *$" &&
	gem-eval run/old.gem >old.tsv 2>err && cat err &&
	grep -q "old.gem: its header has no checksum" err &&
	gem-eval run/params.gem >new.tsv && cut -f2- old.tsv >a && cut -f2- new.tsv >b && cmp a b
'
test_done
