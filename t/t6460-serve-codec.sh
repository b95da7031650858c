#!/bin/bash
# t6460: gem-serve --codec names the codec of θ itself in every reply, so a codec made for
# increments (int8, int4, topk:F) is refused with status 2 and the codecs it may be, on its
# own, with --check, and through gem-run --serve-opt before anything is made; the lossless
# ones and fp16 still serve.
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run
'

for c in int8 int4 topk:0.1; do
	test_expect_success "gem-serve --codec $c: refused, the codecs of θ named" '
		exits 2 gem-serve --codec '"$c"' --listen 127.0.0.1:0 run 2>err &&
		cat err &&
		grep -q "^gem-serve: --codec: a codec for θ itself (raw, zlib, zlib+shuffle or fp16), not one for increments: '"$c"'$" err &&
		test ! -e run/server.url &&
		exits 2 gem-serve --check --codec '"$c"' run 2>err && grep -q "not one for increments" err
	'
done

test_expect_success 'gem-run --serve-opt=--codec=int8: refused before anything is made' '
	exits 2 gem-run -q -n 1 --steps 2 -m tiny.json -d data --serve-opt=--codec=int8 made \
		>out 2>err &&
	cat err &&
	grep -q "not one for increments: int8" err &&
	test ! -e made && test ! -s out
'

test_expect_success 'fp16 and zlib+shuffle still serve' '
	for c in fp16 zlib+shuffle; do
		start_server run --codec $c &&
		gem-work -q --server "$URL" --steps 2 &&
		stop_server || return 1
	done
'

test_done
