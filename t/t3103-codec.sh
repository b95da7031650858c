#!/bin/bash
# t3103: the codec is chosen by option (gem-work --codec, gem-run --codec), not by the URL:
# raw by default; fp16 (lossy, with error feedback) trains a served run and SGP nodes to a sane
# loss, its θ replies come back in fp16 too.
. "$(dirname "$0")/test-lib.sh"

init() { gem-init -q --model tiny.json --data data --lr 0.1 --batch 32 --seed 3 "$@"; }
# loss RUNDIR: gem-eval's test loss of the run
loss() { gem-eval "$1" | awk '!/^#/ { print $4 }'; }

test_expect_success 'setup' '
	make_tiny_data data &&
	init run-raw && init run-zlib
'

test_expect_code 2 'gem-work --codec with an unknown name lists the codecs' '
	gem-work --server http://127.0.0.1:1 --codec fp8 2>err; rc=$?; cat err;
	grep -q "did you mean fp16?); valid: raw, zlib, zlib+shuffle, fp16" err && exit $rc
'
test_expect_code 2 'gem-work --local takes no --codec' '
	gem-work --local run-raw --codec fp16
'

# 2130706433 is 127.0.0.1 spelled as one number: no "127." for a guess to go by
test_expect_success 'the default is raw, however the URL is spelled; --codec zlib+shuffle is taken' '
	start_server run-raw &&
	port=${URL##*:} &&
	GEM_LOG=debug gem-work -q --server "http://2130706433:$port" --steps 3 2>err &&
	grep "codec" err && grep -q "in codec raw$" err &&
	wait_exit $SERVER_PID &&
	start_server run-zlib &&
	GEM_LOG=debug gem-work -q --server "$URL" --codec zlib+shuffle --steps 3 2>err &&
	grep -q "in codec zlib+shuffle$" err &&
	wait_exit $SERVER_PID
'

test_expect_success 'gem-serve and two gem-work --codec fp16 train to a sane loss, near raw' '
	gem-run -q -n 2 --codec fp16 --work-opt=--steps=60 --model tiny.json --data data --lr 0.1 \
		--batch 32 --seed 3 run-fp16 >fp16.tsv &&
	gem-run -q -n 2 --work-opt=--steps=60 --model tiny.json --data data --lr 0.1 --batch 32 \
		--seed 3 run-raw2 >raw.tsv &&
	f=$(awk "!/^#/ { print \$4 }" fp16.tsv) && r=$(awk "!/^#/ { print \$4 }" raw.tsv) &&
	echo "test loss fp16 $f, raw $r" &&
	awk -v f="$f" -v r="$r" "BEGIN { exit !(f < 0.5 && f < 1.5 * r + 0.05) }"
'

test_expect_success 'fp16 θ replies: GET /v1/params?codec=fp16 decodes close to raw' '
	start_server run-fp16 --keep-running &&
	curl -sf "$URL/v1/params?codec=fp16" >p16.msg &&
	curl -sf "$URL/v1/params?codec=raw" >p32.msg &&
	head -1 p16.msg | grep -q "\"codec\":\"fp16\"" &&
	python3 -c "
import json, struct, sys
def blob(path, fmt, size):
    d = open(path, \"rb\").read(); nl = d.index(b\"\\n\"); h = json.loads(d[:nl])
    n = h[\"blobs\"][0][\"count\"]; return struct.unpack(\"<%d%s\" % (n, fmt), d[nl + 1:nl + 1 + n * size])
a, b = blob(\"p16.msg\", \"e\", 2), blob(\"p32.msg\", \"f\", 4)
worst = max(abs(x - y) / max(abs(y), 2 ** -14) for x, y in zip(a, b))
print(\"worst relative error\", worst); sys.exit(not (len(a) == len(b) and worst <= 2 ** -11))
"
'

test_expect_success 'four SGP nodes with gem-run --rule sgp --codec fp16 train to a sane loss' '
	GEM_LOG=debug gem-run -q -n 4 --rule sgp --codec fp16 --work-opt=--steps=40 --model tiny.json \
		--data data --lr 0.1 --batch 32 --seed 3 sgp-fp16 >sgp.tsv &&
	cat sgp.tsv && grep -q "pushes in codec fp16" sgp-fp16/node-3.log &&
	awk "!/^#/ && \$1 == \"average\" { found = 1; ok = \$4 < 0.5 } END { exit !(found && ok) }" sgp.tsv
'
test_done
