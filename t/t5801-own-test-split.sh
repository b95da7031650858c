#!/bin/bash
# t5801: a user's own test split. A CSV table and a pair of .npy arrays take their test split's
# files after the training split's (csv:TRAIN,TEST, npy:X,Y,XT,YT), and gem-eval scores them;
# gem-eval -d scores the data given, its own test split or all of it, never the run's holdout
# drawn again from it, and says which on stderr; gem-export --held-out names the held-out rows,
# and scoring exactly those rows as a test file gives the run's own figures.
. "$(dirname "$0")/test-lib.sh"

# cols TSV: test_loss and test_acc of its last line.
cols() { tail -1 "$1" | cut -f4,5; }

test_expect_success 'setup: a table of 1,600 rows cut in two files, 7 rows of test' '
	python3 "$GEM_SRC/t/gem-made-data.py" csv csv &&
	python3 "$GEM_SRC/t/gem-made-data.py" npy npy &&
	python3 - <<-\PY
	rows = open("csv/t.csv").read().splitlines()
	open("csv/tr.csv", "w").write("\n".join(rows[:1201]) + "\n")
	open("csv/te.csv", "w").write("\n".join([rows[0]] + rows[1201:1208]) + "\n")
	# the same 7 rows, each label moved to the next class: a model that is right on te.csv
	# is wrong on every one of these
	bad = [",".join(c if i != 3 else str((int(c) + 1) % 4) for i, c in enumerate(r.split(",")))
	       for r in rows[1201:1208]]
	open("csv/bad.csv", "w").write("\n".join([rows[0]] + bad) + "\n")
	PY
'

test_expect_success 'csv:TRAIN,TEST: recorded, trained, its test file scored' '
	gem-init -q -m csv/model.json -d csv:csv/tr.csv,csv/te.csv --label label r1 &&
	grep -q "\"dir\": \"csv:$PWD/csv/tr.csv,$PWD/csv/te.csv\"" r1/run.json &&
	gem-work -q --local r1 && gem-eval r1 >ev && cat ev &&
	gem-eval -d csv:csv/te.csv r1 >ev2 2>err && cat err && cmp ev ev2 &&
	grep -q "all its 7 samples are scored (it has no test split)" err &&
	cols ev | awk -F"\t" "{ exit !(\$2 > 0.8) }" &&
	gem-eval -d csv:csv/bad.csv r1 >ev3 && cols ev3 | awk -F"\t" "{ exit !(\$2 < 0.2) }"
'

test_expect_success 'gem-eval -d DATA,TEST: its test split, said so' '
	gem-eval -d csv:csv/t.csv,csv/bad.csv r1 >ev 2>err && cat err &&
	cmp ev ev3 && grep -q "csv/bad.csv: its test split is scored (7 samples)" err
'

test_expect_success 'npy:X,Y,XT,YT: the test arrays scored; -d without them: all of the pair' '
	python3 - <<-\PY
	import importlib.util, os
	spec = importlib.util.spec_from_file_location("a", os.environ["GEM_SRC"] + "/t/gem-arrays.py")
	a = importlib.util.module_from_spec(spec); spec.loader.exec_module(a)
	def data(path):  # an .npy file of format 1.0: its data after the header
	    b = open(path, "rb").read()
	    return b[10 + int.from_bytes(b[8:10], "little"):]
	x, y = data("npy/x.npy"), data("npy/y.npy")
	for name, lo, hi in (("tr", 0, 1300), ("te", 1300, 1600)):
	    a.put("npy/x%s.npy" % name, a.npy("<f4", (hi - lo, 8), x[32 * lo:32 * hi]))
	    a.put("npy/y%s.npy" % name, a.npy("<i8", (hi - lo,), y[8 * lo:8 * hi]))
	PY
	gem-init -q -m npy/model.json -d npy:npy/xtr.npy,npy/ytr.npy,npy/xte.npy,npy/yte.npy r2 &&
	gem-work -q --local r2 && gem-eval r2 >ev &&
	gem-eval -d npy:npy/x.npy,npy/y.npy,npy/xte.npy,npy/yte.npy r2 >ev2 2>err && cmp ev ev2 &&
	grep -q "(300 samples)" err &&
	gem-eval -d npy:npy/x.npy,npy/y.npy r2 >ev3 2>err && cat err ev3 &&
	grep -q "all its 1600 samples are scored" err && ! cmp -s ev ev3
'

test_expect_success 'a run with --holdout: gem-eval -d of its own data scores all of it, not the holdout' '
	gem-init -q -m csv/model.json -d csv:csv/t.csv --label label --holdout 0.2 r3 &&
	gem-work -q --local r3 && gem-eval r3 >held &&
	gem-eval -d csv:csv/t.csv r3 >all 2>err && cat err held all &&
	grep -q "all its 1600 samples are scored (it has no test split; the run.s --holdout is drawn from the run.s data only)" err &&
	! cmp -s held all
'

test_expect_success 'gem-export --held-out: 320 rows; scored as a test file, the run'"'"'s own figures' '
	gem-export --held-out r3 >rows && test $(wc -l <rows) = 320 &&
	sort -n -u rows | cmp - rows &&
	python3 - <<-\PY
	rows = open("csv/t.csv").read().splitlines()
	held = [int(l) for l in open("rows")]
	assert 0 <= held[0] and held[-1] < 1600, held
	open("held.csv", "w").write("\n".join([rows[0]] + [rows[1 + i] for i in held]) + "\n")
	PY
	gem-eval -d csv:csv/t.csv,held.csv r3 >ev && cut -f4,5 held >a && cut -f4,5 ev >b && cmp a b
'

test_expect_code 2 'gem-export --held-out of a run without --holdout: refused, said why' '
	gem-export --held-out r1 >rows 2>err; rc=$?; cat err
	grep -q "no samples held out (the run was made without --holdout)" err && test ! -s rows && exit $rc
'

test_expect_code 2 'csv: with three files: refused, the forms named' '
	gem-init -m csv/model.json -d csv:csv/tr.csv,csv/te.csv,csv/te.csv --label label r4 2>err;
	rc=$?; cat err; grep -q "FILE or TRAIN_FILE,TEST_FILE" err && exit $rc
'

test_done
