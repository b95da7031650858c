#!/bin/bash
# t5600: gem-export writes a run's θ as safetensors that Python's standard library (struct + json)
# reads back tensor by tensor equal to θ, with the model spec, normalisation and version in its
# metadata; the same for a sliced run (its slices merged), --params, -o and --format npz (read
# with zipfile); no binary to a terminal; bad usage, an SGP run without --params and a missing θ
# are refused with the documented exit statuses.
. "$(dirname "$0")/test-lib.sh"

# check_st FILE RUNDIR: every tensor of FILE is θ's slice of the layout, bit for bit, in
# layout order, end to end; the metadata says what the run says.
check_st() {
	python3 "$GEM_SRC/t/gem-theta.py" "$2" >theta.bin &&
	python3 - "$1" "$2" <<-\PY
	import json, struct, sys
	path, run = sys.argv[1], sys.argv[2]
	data = open(path, "rb").read()
	n = struct.unpack("<Q", data[:8])[0]
	assert (8 + n) % 8 == 0, "data not aligned"
	head = json.loads(data[8:8 + n])
	meta = head.pop("__metadata__")
	theta = open("theta.bin", "rb").read()
	want = [("0.weight", [16, 64]), ("0.bias", [16]), ("2.weight", [4, 16]), ("2.bias", [4])]
	assert [(k, v["shape"]) for k, v in head.items()] == want, head
	at = 0
	for name, t in head.items():
	    b, e = t["data_offsets"]
	    assert t["dtype"] == "F32" and b == at, (name, t)
	    size = 4
	    for d in t["shape"]:
	        size *= d
	    assert e - b == size, name
	    assert data[8 + n + b:8 + n + e] == theta[b:e], name + " differs from θ"
	    at = e
	assert 8 + n + at == len(data) == 8 + n + len(theta)
	r = json.load(open(run + "/run.json"))
	assert meta["format"] == "pt"
	assert json.loads(meta["gem.model"]) == r["model"]
	assert meta["gem.model_name"] == r["model_name"]
	norm = json.loads(meta["gem.normalisation"])
	assert abs(norm["mean"][0] - r["data"]["mean"]) < 1e-7 and abs(norm["std"][0] - r["data"]["std"]) < 1e-7
	assert norm["scale"] == 1 / 255
	print("version", meta["gem.theta_version"], "samples", meta["gem.samples"])
	PY
}

test_expect_success 'setup: a tiny run trained 40 steps' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data --batch 32 run &&
	gem-work -q --local run --steps 40
'

test_expect_success 'safetensors read with struct + json: every tensor is θ, metadata of the run' '
	gem-export run >m.safetensors 2>err &&
	grep -q "written to standard output" err &&
	check_st m.safetensors run >out &&
	grep -q "^version 40 samples 1280$" out
'

test_expect_success '-o FILE writes the same bytes; -q says nothing' '
	gem-export -q -o m2.safetensors run 2>err &&
	test ! -s err &&
	cmp m.safetensors m2.safetensors
'

test_expect_success '--format npz: a zip of NAME.npy, each θ slice with its shape' '
	gem-export -q --format npz run >m.npz &&
	python3 - <<-\PY
	import ast, struct, zipfile
	z = zipfile.ZipFile("m.npz")
	assert z.testzip() is None
	assert z.namelist() == ["0.weight.npy", "0.bias.npy", "2.weight.npy", "2.bias.npy"]
	theta, at = open("theta.bin", "rb").read(), 0
	for name in z.namelist():
	    b = z.read(name)
	    assert z.getinfo(name).compress_type == zipfile.ZIP_STORED
	    assert b[:8] == b"\x93NUMPY\x01\x00"
	    hl = struct.unpack("<H", b[8:10])[0]
	    assert (10 + hl) % 64 == 0
	    h = ast.literal_eval(b[10:10 + hl].decode())
	    assert h["descr"] == "<f4" and h["fortran_order"] is False, h
	    size = 4
	    for d in h["shape"]:
	        size *= d
	    assert b[10 + hl:] == theta[at:at + size], name
	    at += size
	assert at == len(theta)
	PY
'

test_expect_success 'a sliced run: the slices of its servers, merged' '
	gem-init -q --model tiny.json --data data --rule gem --workers 2 --batch 16 sliced &&
	gem-sim -q -n 2 --steps 6 --slices 2 sliced >/dev/null &&
	test -d sliced/slice-1-of-2 &&
	gem-export -q sliced >s.safetensors &&
	check_st s.safetensors sliced >out &&
	! cmp -s s.safetensors m.safetensors
'

test_expect_success '--params: a saved copy; an SGP run without it is refused (2)' '
	cp -r run sgp && cp run/params.gem saved.gem &&
	gem-work -q --local run --steps 5 &&
	gem-export -q --params saved.gem run >p.safetensors &&
	cmp p.safetensors m.safetensors &&
	cp saved.gem sgp/node-0.gem &&
	{ gem-export -q sgp >x 2>err; test $? = 2; } &&
	grep -q "an SGP run: its params.gem is only the starting point" err &&
	grep -q -- "--params sgp/node-0.gem" err &&
	gem-export -q --params sgp/node-0.gem sgp >n.safetensors &&
	cmp n.safetensors m.safetensors
'

test_expect_success 'no binary to a terminal (2); -o still writes' '
	script -qec "gem-export run" /dev/null >tty.out 2>&1
	test $? = 2 && grep -q "not writing binary data to a terminal" tty.out &&
	script -qec "gem-export -q -o t.safetensors run" /dev/null >tty.out 2>&1 &&
	gem-export -q run >now.safetensors &&
	cmp t.safetensors now.safetensors
'

test_expect_success 'bad usage exits 2; a run without θ exits 1' '
	{ gem-export >x 2>err; test $? = 2; } && grep -q "which run?" err &&
	{ gem-export run sgp >x 2>err; test $? = 2; } && grep -q "one run at a time" err &&
	{ gem-export --format onnx run >x 2>err; test $? = 2; } && grep -q "safetensors or npz" err &&
	{ gem-export data >x 2>err; test $? = 2; } && grep -q "not a run" err &&
	mkdir nothing && cp run/run.json nothing/ &&
	{ gem-export nothing >x 2>err; test $? = 1; } && grep -q "params.gem" err &&
	test ! -s x
'

# The PyTorch example of gem-export(1): the npz file into a torch.nn.Sequential with NumPy and
# PyTorch alone (Debian's python3-torch and python3-numpy; no safetensors package), and the
# module's loss and accuracy on the run's test set are gem-eval's. Skipped where they are missing.
torch_py=
for p in python3 /usr/bin/python3; do
	if "$p" -c "import numpy, torch" 2>/dev/null; then torch_py=$p; break; fi
done
if [ -z "$torch_py" ]; then
	echo "# skip the PyTorch example: no python3 with numpy and torch"
else
	test_expect_success 'gem-export(1): the npz into PyTorch without safetensors; gem-eval'"'"'s figures' '
		grep -q "^arrays = np.load(\"model.npz\")$" "$GEM_SRC/man/man1/gem-export.1" &&
		gem-export --format npz -o model.npz run && gem-eval run >ev &&
		"$torch_py" - "$(tail -1 ev | cut -f4)" "$(tail -1 ev | cut -f5)" <<-\PY
		import gzip, json, struct, sys
		import numpy as np, torch
		net = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(),
		                          torch.nn.Linear(16, 4), torch.nn.LogSoftmax(dim=1))
		arrays = np.load("model.npz")
		net.load_state_dict({k: torch.from_numpy(arrays[k]) for k in arrays.files})
		norm = json.load(open("run/run.json"))["data"]["norm"]
		with gzip.open("data/t10k-images-idx3-ubyte.gz") as f:
		    x = np.frombuffer(f.read()[16:], np.uint8).reshape(-1, 64).astype(np.float32)
		y = np.frombuffer(open("data/t10k-labels-idx1-ubyte", "rb").read()[8:], np.uint8)
		x = (x * norm["scale"] - norm["mean"][0]) / norm["std"][0]
		out = net(torch.from_numpy(x))
		loss = torch.nn.functional.nll_loss(out, torch.from_numpy(y.astype(np.int64))).item()
		acc = (out.argmax(1).numpy() == y).mean()
		print("torch", loss, acc, "gem-eval", sys.argv[1:])
		assert abs(loss - float(sys.argv[1])) < 1e-4 and abs(acc - float(sys.argv[2])) < 1e-3
		PY
	'
fi

test_done
