#!/bin/bash
# t6450: gem-init checks the test split against the model as it checks the training split,
# before anything is made (gem-eval and the end of gem-run would refuse it only then): an npz
# whose x_test is narrower than x_train, test labels beyond the model's classes, a CIFAR
# test_batch.bin with a label of 12, IDX t10k images of 7x7 beside 8x8 training ones. A
# constant text is refused saying it is constant, not with a number out of range in run.json.
. "$(dirname "$0")/test-lib.sh"

# refused WHAT DIR ARGS...: gem-init ARGS DIR exits 2 naming WHAT (grep -E) and makes nothing
refused() {
	_what=$1 _dir=$2; shift 2
	gem-init -q "$@" "$_dir" 2>err; _rc=$?
	cat err
	test "$_rc" = 2 || { echo "exit $_rc, want 2"; return 1; }
	grep -qE "$_what" err && test ! -e "$_dir"
}

# npz_with NAME PY: d.npz of gem-made-data.py, its arrays changed by the Python lines PY (a
# dict a of name: (descr, shape, bytes)), into NAME.npz
npz_with() {
	python3 - "$GEM_SRC/t/gem-arrays.py" "$1" "$2" <<-\PY
	import importlib.util, struct, sys, zipfile
	spec = importlib.util.spec_from_file_location("arrays", sys.argv[1])
	arrays = importlib.util.module_from_spec(spec); spec.loader.exec_module(arrays)
	a = {}
	with zipfile.ZipFile("npz/d.npz") as z:
	    for name in ("x_train", "y_train", "x_test", "y_test"):
	        b = z.read(name + ".npy"); hl = struct.unpack("<H", b[8:10])[0]
	        h = eval(b[10:10 + hl].decode())
	        a[name] = (h["descr"], h["shape"], b[10 + hl:])
	exec(sys.argv[3])
	arrays.npz(sys.argv[2] + ".npz", {k: arrays.npy(*v) for k, v in a.items()})
	PY
}

test_expect_success 'setup: data that fits, in npz, CIFAR and IDX' '
	python3 "$GEM_SRC/t/gem-made-data.py" npz npz &&
	python3 "$GEM_SRC/t/gem-made-data.py" cifar cifar &&
	make_tiny_data idx &&
	npz_with same "" &&
	gem-init -q --model npz/model.json --data npz:same.npz ok-npz &&
	gem-init -q --model cifar/model.json --data cifar:cifar ok-cifar &&
	gem-init -q --model tiny.json --data idx ok-idx
'

test_expect_success 'an npz whose x_test is narrower than x_train: refused' '
	npz_with narrow "
d, s, b = a[\"x_test\"]; n = s[0]; per = len(b) // n
a[\"x_test\"] = (d, (n, per // 2), b[:n * (per // 2)])" &&
	refused "the test split: the data \(96 values" run-narrow \
		--model npz/model.json --data npz:narrow.npz
'

test_expect_success 'test labels of 200 for a 4-class model: refused' '
	npz_with labels "
d, s, b = a[\"y_test\"]; b = bytearray(b); b[0] = 200
a[\"y_test\"] = (d, s, bytes(b))" &&
	refused "the test split: the data .* 201 classes .* does not fit the model \(.*4 classes" \
		run-labels --model npz/model.json --data npz:labels.npz
'

test_expect_success 'a CIFAR-10 test_batch.bin with a label of 12: refused' '
	mkdir cifar12 && cp cifar/*.bin cifar12/ &&
	printf "\\014" | dd of=cifar12/test_batch.bin bs=1 seek=3073 conv=notrunc 2>/dev/null &&
	refused "test_batch.bin.*12|the test split" run-cifar --model cifar/model.json \
		--data cifar:cifar12
'

test_expect_success 'IDX t10k images of 7x7 beside 8x8 training images: refused' '
	mkdir idx7 && cp idx/* idx7/ &&
	python3 -c "
import gzip, struct
n = 500
with gzip.open(\"idx7/t10k-images-idx3-ubyte.gz\", \"wb\") as f:
    f.write(struct.pack(\">IIII\", 0x803, n, 7, 7) + bytes(n * 49))" &&
	refused "the test split: the data \(49 values" run-idx7 --model tiny.json --data idx7
'

test_expect_success 'a constant text: refused as constant' '
	head -c 30000 /dev/zero | tr "\\0" a >same.txt &&
	cat >gpt8.json <<-\EOF &&
	{"name": "gpt8", "input": [8], "classes": 256, "layers": [
	 {"type": "embedding", "vocab": 256, "dim": 8}, {"type": "position"},
	 {"type": "dense", "out": 256}, {"type": "logsoftmax"}]}
	EOF
	refused "text:same.txt: the training data is constant \(every byte the same" run-text \
		--model gpt8.json --data text:same.txt &&
	! grep -q "data.std" err
'

test_done
