#!/bin/bash
# t5900: an external model (gem-exec(7)), here t/exec-numpy.py, under every program: gem-init
# records its layout and data and writes its θ₀; local training, a served run with two workers
# and gem-sim train it; gem-sim --replay of the served run ends with its θ bit for bit; gem-eval
# scores its own test split; gem-export names its tensors; gem-serve never starts it; a
# language model samples text.
. "$(dirname "$0")/test-lib.sh"

CHILD="/usr/bin/python3 $GEM_SRC/t/exec-numpy.py"

# theta RUN: the CRC-32 of θ in RUN/params.gem (its header's, over the raw floats)
theta() { head -1 "$1/params.gem" | sed -n 's/.*"crc32":\([0-9]*\).*/\1/p'; }

test_expect_success 'gem-init records the child: its tensors, its data, θ₀ from its init' '
	gem-init -q --model "exec:$CHILD" -b 16 -e 4 --exec-timeout 30 run &&
	python3 - run/run.json <<-\PY
	import json, sys
	r = json.load(open(sys.argv[1]))
	m = r["model"]
	assert m["exec"].endswith("exec-numpy.py") and m["timeout"] == 30, m
	assert [t[0] for t in m["tensors"]] == ["0.weight", "0.bias", "2.weight", "2.bias"], m
	assert (m["classes"], m["train"], m["test"]) == (3, 300, 90), m
	assert r["data"]["name"] == "model:train=300,test=90", r["data"]
	assert r["model_name"] == "exec-numpy"
	PY
'

test_expect_success 'the same seed gives the same θ₀, another seed another' '
	gem-init -q --model "exec:$CHILD" -b 16 again &&
	gem-init -q --model "exec:$CHILD" -b 16 -s 2 other &&
	test "$(theta run)" = "$(theta again)" && test "$(theta run)" != "$(theta other)"
'

test_expect_success 'gem-init refuses --data, --holdout, --label and --microbatches with an external model' '
	! gem-init -q --model "exec:$CHILD" --data fashion-mnist bad 2>err &&
	grep -q "an external model brings its own data" err && test ! -e bad &&
	! gem-init -q --model "exec:$CHILD" --holdout 0.1 bad 2>err &&
	grep -q -- "--holdout" err &&
	{ gem-init -q --model "exec:$CHILD" --microbatches 2 bad 2>err; test $? = 2; } &&
	grep -q -- "--microbatches: an external model cuts its batches itself" err && test ! -e bad
'

test_expect_success 'gem-work --local trains it; gem-eval scores its test split' '
	cp -r run local &&
	gem-eval local >before.tsv &&
	gem-work -q --local local &&
	gem-eval local >after.tsv &&
	python3 - before.tsv after.tsv <<-\PY
	import sys
	rows = [l.split("\t") for f in sys.argv[1:] for l in open(f) if not l.startswith("#")]
	(_, v0, _, l0, a0, _), (_, v1, s1, l1, a1, _) = rows
	assert v0 == "0" and int(v1) == 76 and int(s1) == 1200, rows   # 4 epochs of 300 at 16
	assert float(l1) < float(l0) / 2 and float(a1) > 0.85, rows
	PY
'

test_expect_success 'a served run with two workers, replayed by gem-sim: the same θ' '
	gem-init -q --model "exec:$CHILD" -b 16 -e 2 --workers 2 served &&
	start_server served &&
	{ gem-work -q --server served & } && w0=$! &&
	{ gem-work -q --server served & } && w1=$! &&
	wait_exit $w0 120 && wait_exit $w1 120 && stop_server &&
	grep -q "\"event\":\"stop\"" served/log.jsonl &&
	gem-sim -q --replay served/log.jsonl replayed &&
	test "$(theta served)" = "$(theta replayed)" &&
	test "$(theta served)" != "$(theta run)"
'

test_expect_success 'gem-serve never starts the child (it only needs the layout)' '
	cp -r run nochild &&
	sed -i "s|\"exec\": \"[^\"]*\"|\"exec\": \"/nonexistent/child\"|" nochild/run.json &&
	grep -q nonexistent nochild/run.json &&
	start_server nochild &&
	curl -sf -X POST -d "{}" $URL/v1/join | head -1 | grep -q "\"worker\":0" &&
	stop_server
'

test_expect_success 'gem-sim trains it with 3 virtual workers, one child per thread' '
	gem-sim -q -n 3 -m "exec:$CHILD" -b 16 -e 2 sim >sim.tsv &&
	gem-eval sim >sim-eval.tsv &&
	python3 -c "
import sys
r = [l.split() for l in open(\"sim-eval.tsv\") if not l.startswith(\"#\")][0]
assert float(r[4]) > 0.8, r"
'

test_expect_success 'gem-export names the child'"'"'s tensors; --init-from takes them back' '
	gem-export -o local.safetensors local &&
	python3 - local.safetensors <<-\PY &&
	import json, struct, sys
	b = open(sys.argv[1], "rb").read(); n = struct.unpack("<Q", b[:8])[0]
	h = json.loads(b[8:8 + n]); h.pop("__metadata__")
	assert sorted(h) == ["0.bias", "0.weight", "2.bias", "2.weight"], h
	assert h["0.weight"]["shape"] == [16, 4], h
	PY
	gem-init -q --model "exec:$CHILD" -b 16 --init-from local.safetensors from &&
	test "$(theta from)" = "$(theta local)"
'

test_expect_success 'a language model: trained on its text, scored, sampled' '
	gem-init -q --model "exec:$CHILD --text" -b 8 -e 1 text &&
	grep -q "positions=16" text/run.json &&
	gem-work -q --local text &&
	gem-eval text >text.tsv &&
	python3 -c "
import math
r = [l.split() for l in open(\"text.tsv\") if not l.startswith(\"#\")][0]
assert float(r[3]) < 3, r" &&   # bits per byte: 3 is a uniform guess among 8
	gem-sample --prompt "$(printf "\\001\\002")" --bytes 20 text >sample.bin &&
	test $(wc -c <sample.bin) = 22 &&
	python3 -c "assert max(open(\"sample.bin\",\"rb\").read()) < 8"
'

test_expect_success 'gem-run --hosts: the model'"'"'s program is checked on every host first' '
	make_fake_ssh fakebin && mkdir -p farbin &&
	printf "#!/bin/sh\ncase \" \$* \" in *\" far test -e \"*) exit 1 ;;\nesac\nexec \"%s/fakebin/ssh\" \"\$@\"\n" "$PWD" >farbin/ssh &&
	chmod +x farbin/ssh && printf "near\nfar\n" >hosts &&
	{ PATH="$PWD/farbin:$PATH" gem-run -q --hosts hosts -n 2 -m "exec:$CHILD" -b 16 far 2>err; test $? = 1; } &&
	cat err && grep -q "^gem-run: far: no file $GEM_SRC/t/exec-numpy.py, which the run.s model runs" err &&
	! grep -q "near:" err && test ! -e far/log.jsonl && test ! -e far/server.url
'

test_done
