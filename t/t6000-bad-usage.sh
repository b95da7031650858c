#!/bin/bash
# t6000: bad usage and bad input give a clear message and the documented exit status, and
# nothing already saved is touched.
. "$(dirname "$0")/test-lib.sh"

cat >tiny.json <<'JSON'
{"name":"tiny","input":[784],"classes":10,"layers":[{"type":"dense","out":10},{"type":"logsoftmax"}]}
JSON

for prog in gem-init gem-work gem-eval; do
	test_expect_success "$prog --help and --version" "
		$prog --help | grep -q '^usage: $prog' && $prog --version | grep -q '^$prog [0-9]'
	"
	test_expect_code 2 "$prog with an unknown option exits 2" "$prog --no-such-option"
done

test_expect_code 2 'gem-init without RUNDIR' 'gem-init'
test_expect_code 2 'gem-init with a bad --lr' 'gem-init --lr abc run'
test_expect_code 2 'gem-init with a negative --batch' 'gem-init --batch -3 run'
test_expect_code 2 'gem-init with an unknown rule' 'gem-init --rule nosuch run 2>err; rc=$?; grep -q nosuch err; exit $rc'
test_expect_code 2 'gem-init with an unknown model' 'gem-init --model nosuch run'
test_expect_code 2 'gem-init with an unknown dataset names where it looked' '
	GEM_DATA_PATH=/nonexistent gem-init --model tiny.json --data nosuchdata run 2>err; rc=$?
	grep -q nosuchdata err && grep -q /nonexistent err; exit $rc'

test_expect_code 2 'a model spec with an unknown layer names it' '
	echo "{\"name\":\"x\",\"input\":[784],\"classes\":10,\"layers\":[{\"type\":\"conv3d\"}]}" >bad.json
	gem-init --model bad.json run 2>err; rc=$?; grep -q "layers\[0\]" err && grep -q conv3d err; exit $rc'

test_expect_code 2 'a model spec with a missing field names it' '
	echo "{\"name\":\"x\",\"input\":[784],\"classes\":10,\"layers\":[{\"type\":\"dense\"}]}" >bad2.json
	gem-init --model bad2.json run 2>err; rc=$?; grep -q "layers\[0\].out" err; exit $rc'

test_expect_code 2 'a model spec that is not JSON' '
	echo "{ not json" >bad3.json; gem-init --model bad3.json run 2>err; rc=$?; grep -q bad3.json err; exit $rc'

test_expect_code 2 'gem-work needs --local or --server' 'gem-work'
test_expect_code 2 'gem-work with both --epochs and --steps' 'gem-work --local x --epochs 1 --steps 3'
test_expect_code 2 'gem-work --local on a directory that is not a run' 'mkdir -p empty && gem-work --local empty'
test_expect_code 2 'gem-eval on a directory that is not a run' 'mkdir -p empty && gem-eval empty'

test_expect_success 'a corrupt params file is refused and left as it is' '
	test_have_dataset=1
	mkdir -p d && python3 -c "
import struct,gzip
open(\"d/train-images-idx3-ubyte\",\"wb\").write(struct.pack(\">IIII\",0x803,10,28,28)+bytes(range(256))*30+bytes(160))
open(\"d/train-labels-idx1-ubyte\",\"wb\").write(struct.pack(\">II\",0x801,10)+bytes(10))
open(\"d/t10k-images-idx3-ubyte\",\"wb\").write(struct.pack(\">IIII\",0x803,10,28,28)+bytes(range(256))*30+bytes(160))
open(\"d/t10k-labels-idx1-ubyte\",\"wb\").write(struct.pack(\">II\",0x801,10)+bytes(10))" &&
	gem-init -q --model tiny.json --data d run &&
	size=$(wc -c <run/params.gem) &&
	printf "\xff" | dd of=run/params.gem bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null &&
	cp run/params.gem before &&
	! gem-work -q --local run --steps 1 2>err && grep -q params.gem err &&
	! gem-eval run 2>err2 && grep -q params.gem err2 &&
	cmp before run/params.gem
'

test_expect_success 'a truncated dataset file is an error naming the file' '
	gem-init -q --model tiny.json --data d --force run &&
	cp d/t10k-images-idx3-ubyte whole &&
	test_when_finished "mv whole d/t10k-images-idx3-ubyte" &&
	head -c 1000 d/t10k-images-idx3-ubyte >d/t && mv d/t d/t10k-images-idx3-ubyte &&
	! gem-eval run 2>err && grep -q t10k-images err
'
test_expect_code 2 'gem-init refuses data without a test split, and makes nothing' '
	mkdir trainonly && cp d/train-* trainonly/ &&
	gem-init -q --model tiny.json --data trainonly tonly 2>err; rc=$?; cat err;
	grep -q "no test split" err && grep -q t10k-labels err && test ! -e tonly && exit $rc
'
test_expect_code 2 'gem-init --gem-ref with a bad value names the choices' '
	gem-init -q --model tiny.json --data d --gem-ref push refrun 2>err; rc=$?; cat err;
	grep -q "pull or commit" err && test ! -e refrun/run.json && exit $rc
'
test_expect_code 2 'gem-init --gem-ref with a rule that does not use it' '
	gem-init -q --model tiny.json --data d --rule downpour --gem-ref pull refrun 2>err; rc=$?;
	grep -q "does not use it" err && test ! -e refrun/run.json && exit $rc
'
test_expect_code 2 'gem-init --state-precision with a bad value names the choices' '
	gem-init -q --model tiny.json --data d --state-precision fp16 precrun 2>err; rc=$?; cat err;
	grep -q "not f32 or bf16" err && test ! -e precrun/run.json && exit $rc
'
test_expect_code 2 'gem-init --state-precision with a rule that does not use it' '
	gem-init -q --model tiny.json --data d --rule dcasgd --state-precision bf16 precrun 2>err;
	rc=$?; grep -q "does not use it" err && test ! -e precrun/run.json && exit $rc
'
test_expect_code 2 'gem-init --rule gem --outer-momentum without --window says it needs one' '
	gem-init -q --model tiny.json --data d --outer-momentum 0.5 omrun 2>err; rc=$?; cat err;
	grep -q "window" err && test ! -e omrun/run.json && exit $rc
'
test_expect_code 2 'gem-init --fragments that does not divide --window is refused' '
	gem-init -q --model tiny.json --data d --rule diloco -n 2 --window 10 --fragments 3 frun \
		2>err; rc=$?; cat err;
	grep -q "does not divide" err && test ! -e frun/run.json && exit $rc
'
test_expect_code 2 'gem-init --fragments and --mix with a rule that does not use them' '
	gem-init -q --model tiny.json --data d --rule sync -n 2 --fragments 2 frun 2>err; rc=$?;
	grep -q "does not use it" err && test ! -e frun/run.json &&
	gem-init -q --model tiny.json --data d --rule async-diloco --mix 1 frun 2>err;
	test $? = 2 && grep -q "mix" err && test ! -e frun/run.json && exit $rc
'
test_expect_code 2 'gem-serve --slice refuses a run with fragments (they need one server)' '
	gem-init -q --model tiny.json --data d --rule diloco -n 2 --window 10 --fragments 2 frun ||
		exit 9
	gem-serve --listen 127.0.0.1:0 --slice 0/2 frun 2>err; rc=$?; cat err;
	grep -q "fragments need one server" err && exit $rc
'
test_expect_code 2 'gem-init --overlap with --dynamic-local-updates is refused' '
	gem-init -q --model tiny.json --data d --rule async-diloco -n 2 --window 10 --overlap 1 \
		--dynamic-local-updates orun 2>err; rc=$?; cat err;
	grep -q "dynamic_local_updates" err && test ! -e orun/run.json && exit $rc
'
test_expect_code 2 'gem-init --overlap of H/P steps or more is refused' '
	gem-init -q --model tiny.json --data d --rule diloco -n 2 --window 10 --fragments 2 \
		--overlap 5 orun2 2>err; rc=$?; cat err;
	grep -q "overlap" err && test ! -e orun2/run.json && exit $rc
'
test_expect_code 2 'gem-init --rule sync without --workers names the option to give' '
	gem-init -q --model tiny.json --data d --rule sync syncrun 2>err; rc=$?; cat err;
	grep -q "give --workers N" err && test ! -e syncrun/run.json && exit $rc
'
test_expect_code 2 'an unknown rule lists the valid ones; a typo gets a guess' '
	gem-init --rule downpoor run2 2>err; rc=$?; cat err
	grep -q "unknown rule \"downpoor\" (did you mean downpour?); valid: gem, downpour," err &&
	test ! -e run2 && exit $rc
'
test_expect_code 2 'an unknown model lists the built-in ones; a typo gets a guess' '
	gem-init --model mlpp run2 2>err; rc=$?; cat err
	grep -q "unknown model \"mlpp\" (did you mean mlp?); valid: cnn, gpt, mlp" err && exit $rc
'
test_expect_code 2 'gem-serve: an unknown codec lists the valid ones' '
	gem-serve --codec zlb run 2>err; rc=$?; cat err
	grep -q "did you mean zlib?); valid: raw, zlib, zlib+shuffle" err && exit $rc
'
test_expect_success 'a built-in model name wins over a directory of that name' '
	mkdir -p mlp &&
	gem-init -q --model mlp --data d builtin &&
	grep -q "\"model_name\": *\"mlp\"" builtin/run.json
'
test_expect_code 2 'a directory given as the model is refused with a reason' '
	mkdir -p mydir && gem-init --model mydir run3 2>err; rc=$?; cat err
	grep -q "mydir: a directory, not a model spec" err && exit $rc
'
test_done
