#!/bin/bash
# t5901: the PyTorch examples (share/gem/examples/torch/) as external models, a few steps
# each: the paper's CNN on Fashion-MNIST has the built-in cnn's tensors and trains locally; the
# byte-level GPT on kjv, served with diloco to two workers, replays bit for bit and writes text.
# Debian's python3-torch and python3-numpy (make deps) are what it runs with.
. "$(dirname "$0")/test-lib.sh"
test_have_dataset
[ -s /usr/share/datasets/kjv/kjv.txt ] || test_skip_all "kjv not written (make deps)"

PY=/usr/bin/python3
EX=$GEM_SRC/share/gem/examples/torch
theta() { head -1 "$1/params.gem" | sed -n 's/.*"crc32":\([0-9]*\).*/\1/p'; }
# names FILE: a safetensors file's tensor names and shapes, one a line, in file order
names() {
	$PY -c "
import json, struct, sys
b = open(sys.argv[1], 'rb').read(); n = struct.unpack('<Q', b[:8])[0]
h = json.loads(b[8:8 + n]); h.pop('__metadata__', None)
print('\n'.join('%s %s' % (k, h[k]['shape']) for k in sorted(h, key=lambda k: h[k]['data_offsets'][0])))" "$1"
}

test_expect_success 'the PyTorch cnn has the built-in cnn'"'"'s tensors and trains' '
	gem-init -q --model "exec:$PY $EX/cnn.py --limit 640" torch-cnn &&
	gem-init -q --model cnn own-cnn &&
	gem-export -o torch.st torch-cnn && gem-export -o own.st own-cnn &&
	names torch.st >torch.names && names own.st >own.names &&
	test $(wc -l <own.names) = 10 && cmp torch.names own.names &&
	gem-eval torch-cnn >before.tsv &&
	gem-work -q -t 20 --local torch-cnn &&
	gem-eval torch-cnn >after.tsv &&
	$PY -c "
b, a = ([l.split() for l in open(f) if not l.startswith(\"#\")][0] for f in (\"before.tsv\", \"after.tsv\"))
assert a[1] == \"20\" and float(a[3]) < float(b[3]) - 0.01, (b, a)"
'

test_expect_success 'the PyTorch gpt served with diloco to two workers, replayed bit for bit' '
	gem-init -q --model "exec:$PY $EX/gpt.py --limit 200000" --rule diloco --window 2 --workers 2 \
		-b 4 --optimizer adamw --lr 1e-3 torch-gpt &&
	grep -q "positions=128" torch-gpt/run.json &&
	start_server torch-gpt &&
	{ gem-work -q -t 4 --server torch-gpt & } && w0=$! &&
	{ gem-work -q -t 4 --server torch-gpt & } && w1=$! &&
	wait_exit $w0 300 && wait_exit $w1 300 && stop_server &&
	test $(grep -c "\"loss\"" torch-gpt/log.jsonl) -ge 2 &&
	gem-sim -q --replay torch-gpt/log.jsonl replayed &&
	test "$(theta torch-gpt)" = "$(theta replayed)"
'

test_expect_success 'the PyTorch gpt writes text (predict)' '
	gem-sample --prompt "And God said" --bytes 16 torch-gpt >text &&
	test $(wc -c <text) = 28
'

test_done
