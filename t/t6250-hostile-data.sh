#!/bin/bash
# t6250: a run that does not fit its data, or whose run.json numbers are out of range, is
# refused wherever it meets its data (a worker given the run by a server, local training,
# gem-sim, gem-eval), before a sample is read: nothing overflows a buffer.
. "$(dirname "$0")/test-lib.sh"

# bad_data DIR SIDE CLASSES: a dataset of SIDE×SIDE images with labels 0..CLASSES-1.
bad_data() {
	python3 - "$@" <<'PY'
import struct, sys, os
d, side, classes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]); os.makedirs(d, exist_ok=True)
for split, n in (("train", 200), ("t10k", 50)):
    with open(f"{d}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, side, side) + bytes((i * 7) % 256 for i in range(n * side * side)))
    with open(f"{d}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % classes for i in range(n)))
PY
}

# exits CODE COMMAND...: COMMAND exits with CODE (stderr to err).
exits() {
	_want=$1; shift
	"$@" 2>err; _rc=$?
	cat err
	test "$_rc" = "$_want" || { echo "exit $_rc, want $_want"; return 1; }
}

# set_field RUNDIR SECTION KEY VALUE: run.json's SECTION.KEY becomes the JSON VALUE.
set_field() {
	python3 - "$@" <<'PY'
import json, sys
p = sys.argv[1] + "/run.json"; r = json.load(open(p))
r[sys.argv[2]][sys.argv[3]] = json.loads(sys.argv[4])
json.dump(r, open(p, "w"))
PY
}

test_expect_success 'setup: a run, and datasets that do not fit its model' '
	make_tiny_data data &&
	bad_data big 16 4 &&
	bad_data small 4 4 &&
	bad_data classes 8 8 &&
	gem-init -q --model tiny.json --data data run &&
	gem-work -q --local run --steps 2
'

# The run's data swapped for DATA: each program refuses it and says why.
for d in big small classes; do
	test_expect_success "gem-work --local refuses data that does not fit ($d)" "
		rm -rf r-$d && cp -R run r-$d && set_field r-$d data dir '\"'\$PWD/$d'\"' &&
		exits 2 gem-work -q --local r-$d --steps 2 &&
		 grep -q 'does not fit the model' err
	"
	test_expect_success "gem-sim refuses data that does not fit ($d)" "
		exits 2 gem-sim -q -n 2 --steps 2 r-$d &&
		 grep -q 'does not fit the model' err
	"
	test_expect_success "gem-eval refuses data that does not fit ($d)" "
		exits 2 gem-eval r-$d &&
		 grep -q 'does not fit the model' err
	"
	test_expect_success "a worker refuses the run its server gives for its data ($d)" "
		start_server r-$d &&
		test_when_finished \"stop_if_running \$SERVER_PID\" &&
		v0=\$(curl -sf \$URL/v1/health | grep -o '\"version\": *[0-9]*') &&
		exits 1 gem-work -q --server \$URL --steps 2 &&
		 grep -q 'does not fit the model' err &&
		curl -sf \$URL/v1/health | grep -q \"\$v0\"
	"
done

# run.json numbers beyond what gem-init writes: refused by name, not cast.
for f in 'batch 1e10' 'batch 65537' 'batch 2.5' 'epochs 1e10' 'epochs 0' 'seed -1' \
	 'seed 1.5' 'seed 1e30' 'lr 1e300' 'lr -1' 'momentum 1e40' 'weight_decay -1'; do
	set -- $f
	test_expect_success "train.$1: $2 is refused" "
		rm -rf r && cp -R run r && set_field r train $1 $2 &&
		exits 2 gem-work -q --local r --steps 1 &&
		 grep -q 'train.$1' err
	"
done
for f in 'std 0' 'std 1e-40' 'std 1e300' 'mean -1' 'mean 1e300'; do
	set -- $f
	test_expect_success "data.$1: $2 is refused" "
		rm -rf r && cp -R run r && set_field r data $1 $2 &&
		exits 2 gem-work -q --local r --steps 1 &&
		 grep -q 'data.$1' err
	"
done

test_expect_success '"." and ".." are not dataset names' '
	for d in . ..; do
		{ gem-init -q --data "$d" dotrun 2>err; rc=$?; } ; test $rc = 2 &&
		grep -q "is not a dataset name" err && test ! -e dotrun/run.json || return 1
	done
'
test_done
