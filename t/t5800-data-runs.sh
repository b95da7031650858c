#!/bin/bash
# t5800: users' own data end to end: a CSV table, a pair of .npy arrays, an .npz archive and
# CIFAR binary batches (learnable files made by t/gem-made-data.py) each train with gem-run -n 2
# to an accuracy clearly above chance; --holdout and the normalisation by group are stored in
# run.json and used by every program (gem-eval, gem-work --local, gem-sim, a replay); 300
# classes; a dataset without a test split is refused with the hint to use --holdout; a run made
# before (no data.norm) still evaluates; gem-run --hosts names a host that lacks the files.
. "$(dirname "$0")/test-lib.sh"

# acc TSV: the test accuracy of gem-eval's (or gem-run's) last line.
acc() { tail -1 "$1" | awk -F'\t' '{ print $5 }'; }
# above X TSV: its accuracy is above X.
above() { awk -v a="$(acc "$2")" -v x="$1" 'BEGIN { if (!(a > x)) { print "accuracy " a " <= " x; exit 1 } }'; }
# norm RUNDIR GROUPS SCALE: run.json's data.norm has GROUPS of each, stds > 0, and SCALE.
norm() {
	python3 - "$@" <<-\PY
	import json, sys
	d = json.load(open(sys.argv[1] + "/run.json"))["data"]
	n = d["norm"]
	assert len(n["mean"]) == len(n["std"]) == int(sys.argv[2]), n
	assert all(s > 0 for s in n["std"]), n
	assert abs(n["scale"] - eval(sys.argv[3])) < 1e-15, n
	PY
}

test_expect_success 'setup: made data in every format' '
	for f in csv npy npz cifar many; do
		python3 "$GEM_SRC/t/gem-made-data.py" $f $f || return 1
	done
'

test_expect_code 2 'a table without test split and without --holdout: refused, --holdout advised' '
	gem-init -m csv/model.json -d csv:csv/t.csv --label label run 2>err;
	rc=$?; cat err; grep -q "no test split" err && grep -q -- "--holdout FRACTION" err &&
	test ! -e run/run.json && exit $rc
'

test_expect_code 2 'a CSV table without --label: refused, --label named' '
	gem-init -m csv/model.json -d csv:csv/t.csv --holdout 0.2 run 2>err;
	rc=$?; cat err; grep -q -- "--label COLUMN" err && exit $rc
'

test_expect_success 'CSV: gem-run -n 2 trains above chance (0.25); label, holdout, norm stored' '
	gem-run -q -n 2 -m csv/model.json -d csv:csv/t.csv --label label --holdout 0.2 r-csv >out &&
	cat out && above 0.6 out &&
	python3 -c "import json; d = json.load(open(\"r-csv/run.json\"))[\"data\"]; \
		assert d[\"label\"] == \"label\" and d[\"holdout\"] == 0.2 and d[\"dir\"].startswith(\"csv:/\"), d" &&
	norm r-csv 8 1
'

test_expect_success 'gem-eval reads the run again: the same figures' '
	gem-run -q -n 2 -m csv/model.json -d csv:csv/t.csv --label label --holdout 0.2 -t 10 r-csv2 >out &&
	gem-eval r-csv2 >ev && tail -1 out | cut -f2-5 >a && tail -1 ev | cut -f2-5 >b && cmp a b
'

test_expect_success 'the features are normalised per feature: scales 0.01 to 1000 all in reach' '
	python3 - <<-\PY
	import json
	n = json.load(open("r-csv/run.json"))["data"]["norm"]
	assert n["std"][5] > 100 * n["std"][1] > 10 * n["std"][0], n
	PY
'

test_expect_success 'gem-sim --replay of the CSV run ends with its θ, bit for bit' '
	gem-sim -q --replay r-csv/log.jsonl again >/dev/null &&
	python3 "$GEM_SRC/t/gem-theta.py" r-csv >a.bin && python3 "$GEM_SRC/t/gem-theta.py" again >b.bin &&
	cmp a.bin b.bin
'

test_expect_success 'npy: gem-run -n 2 trains above chance (0.25)' '
	gem-run -q -n 2 -m npy/model.json -d npy:npy/x.npy,npy/y.npy --holdout 0.2 r-npy >out &&
	cat out && above 0.6 out && norm r-npy 8 1
'

test_expect_success 'npy: gem-work --local and gem-sim train the same run' '
	gem-init -q -m npy/model.json -d npy:npy/x.npy,npy/y.npy --holdout 0.2 l-npy &&
	gem-work -q --local l-npy && gem-eval l-npy >ev && cat ev && above 0.6 ev &&
	gem-sim -q -n 3 -m npy/model.json -d npy:npy/x.npy,npy/y.npy --holdout 0.2 s-npy >/dev/null &&
	gem-eval s-npy >ev && cat ev && above 0.6 ev
'

test_expect_success 'npz: its own test split, 3 channels normalised, above chance (0.25)' '
	gem-run -q -n 2 -m npz/model.json -d npz:npz/d.npz r-npz >out &&
	cat out && above 0.6 out && norm r-npz 3 1/255 &&
	! grep -q holdout r-npz/run.json
'

test_expect_success 'npz: its arrays by name (swapped: 300 to train on), kept in data.dir' '
	gem-init -m npz/model.json -d npz:npz/d.npz,x_test,y_test,x_train,y_train r-named >out &&
	cat out && grep -q "(300 samples" out &&
	python3 -c "import json; d = json.load(open(\"r-named/run.json\"))[\"data\"][\"dir\"]; \
		assert d.startswith(\"npz:/\") and d.endswith(\"/d.npz,x_test,y_test,x_train,y_train\"), d" &&
	gem-eval r-named >ev 2>/dev/null && cat ev && test "$(wc -l <ev)" = 2
'

test_expect_code 1 'npz: a name the file does not hold: refused, its arrays listed as named' '
	gem-init -m npz/model.json -d npz:npz/d.npz,x_train,labels run 2>err;
	rc=$?; cat err; grep -q "no array .labels." err && grep -q "holds x_train, y_train, x_test, y_test)" err &&
	test ! -e run/run.json && exit $rc
'

test_expect_success 'CIFAR batches: above chance (0.1), 3 channels' '
	gem-run -q -n 2 -m cifar/model.json -d cifar:cifar r-cifar >out &&
	cat out && above 0.4 out && norm r-cifar 3 1/255
'

test_expect_success '300 classes: above chance (1/300) many times over' '
	gem-run -q -n 2 -e 4 -m many/model.json -d npy:many/x.npy,many/y.npy --holdout 0.25 r-many >out &&
	cat out && above 0.2 out &&
	python3 -c "import json; assert json.load(open(\"r-many/run.json\"))[\"model\"][\"classes\"] == 300"
'

test_expect_code 2 'gem-eval --per-class refuses 300 classes' '
	gem-eval --per-class r-many 2>err; rc=$?; cat err; grep -q "at most 256" err && exit $rc
'

test_expect_success 'a run made before (run.json without data.norm) evaluates as before' '
	make_tiny_data tiny &&
	gem-init -q -m tiny.json -d tiny old && gem-work -q --local old --steps 30 &&
	norm old 1 1/255 &&
	gem-eval old >with &&
	python3 - <<-\PY &&
	import json
	r = json.load(open("old/run.json"))
	n = r["data"].pop("norm")
	assert abs(n["mean"][0] - r["data"]["mean"]) < 1e-12 and abs(n["std"][0] - r["data"]["std"]) < 1e-12
	json.dump(r, open("old/run.json", "w"))
	PY
	gem-eval old >without && cat with without &&
	test "$(acc with)" = "$(acc without)"
'

test_expect_success 'gem-run --hosts: a host without the files of the data is named before any worker starts' '
	make_fake_ssh fakebin && mkdir -p farbin &&
	printf "#!/bin/sh\ncase \" \$* \" in *\" far test -r \"*) exit 1 ;;\nesac\nexec \"%s/fakebin/ssh\" \"\$@\"\n" "$PWD" >farbin/ssh &&
	chmod +x farbin/ssh && printf "near\nfar\n" >hosts &&
	{ PATH="$PWD/farbin:$PATH" gem-run -q --hosts hosts -n 2 -m csv/model.json -d csv:csv/t.csv --label label \
		--holdout 0.2 r-far 2>err; test $? = 1; } &&
	cat err && grep -q "^gem-run: far cannot read $PWD/csv/t.csv (the run.s --data csv:)" err &&
	grep -q "scp -r $PWD/csv/t.csv far:$PWD/csv/t.csv" err && ! grep -q "near cannot" err &&
	test ! -e r-far/log.jsonl && test ! -e r-far/server.url
'

test_expect_code 2 'a text takes no --holdout' '
	printf "some text, long enough to hold a window or two of a model\n%.0s" 1 2 3 4 5 6 >t.txt &&
	gem-init -m gpt -d text:t.txt --holdout 0.1 run 2>err; rc=$?; cat err;
	grep -q "holdout" err && exit $rc
'

test_done
