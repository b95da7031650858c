#!/bin/bash
# t5100: gem-plot-data turns a run's log.jsonl into gnuplot data and scripts: every view on a
# small log worked by hand, several runs side by side, malformed lines, bad usage.
. "$(dirname "$0")/test-lib.sh"

# Run A (rule gem): five good updates by workers 1 and 2 among events and two bad lines.
#   version worker tau loss samples elapsed  pi.mean
#   1       1      0   4    32      10.0     1 2 3
#   2       2      1   2    64      10.5     3 4 5
#   3       1      1   6    96      10.9     5 6 7
#   4       2      2   null 128     11.2     7 8 9
#   5       1      1   3    160     12.6     9 10 11
mkdir -p runA runB
cat >runA/run.json <<'JSON'
{"rule": {"name": "gem"}, "model_name": "tiny"}
JSON
cat >runA/log.jsonl <<'LOG'
{"event":"start","time":100,"rule":"gem","model":"tiny","tensors":["0.weight","0.bias","2.weight"],"version":0}
{"event":"join","time":100,"worker":1,"version":0}
{"time":101,"elapsed":10.0,"version":1,"worker":1,"tau":0,"loss":4,"samples":32,"pi":{"median":[0,0.5,1],"mean":[1,2,3],"zero":[0.5,0.5,0.5],"scale":[0.1,0.2,0.3]},"scale":0.5}
{"time":101,"elapsed":10.5,"version":2,"worker":2,"tau":1,"loss":2,"samples":64,"pi":{"median":[0,0.5,1],"mean":[3,4,5],"zero":[0.5,0.5,0.5],"scale":[0.1,0.2,0.3]},"scale":0.5}
this line is not JSON
{"time":101,"elapsed":10.9,"version":3,"worker":1,"tau":1,"loss":6,"samples":96,"pi":{"median":[0,0.5,1],"mean":[5,6,7],"zero":[0.5,0.5,0.5],"scale":[0.1,0.2,0.3]},"scale":0.5}
{"time":101,"elapsed":11.2,"version":4,"worker":2,"tau":"two","loss":6,"samples":128}
{"event":"somethingnew","time":101}
{"time":101,"elapsed":11.2,"version":4,"worker":2,"tau":2,"loss":null,"samples":128,"pi":{"median":[0,0.5,1],"mean":[7,8,9],"zero":[0.5,0.5,0.5],"scale":[0.1,0.2,0.3]},"scale":0.5}
{"time":101,"elapsed":12.6,"version":5,"worker":1,"tau":1,"loss":3,"samples":160,"pi":{"median":[0,0.5,1],"mean":[9,10,11],"zero":[0.5,0.5,0.5],"scale":[0.1,0.2,0.3]},"scale":0.5}
{"event":"stop","time":102,"version":5,"reason":"done"}
LOG

# Run B (rule downpour, no pi): three workers, one update each.
cat >runB/run.json <<'JSON'
{"rule": {"name": "downpour", "window": 1}, "model_name": "tiny"}
JSON
cat >runB/log.jsonl <<'LOG'
{"event":"start","time":100,"rule":"downpour","model":"tiny","tensors":["0.weight"],"version":0}
{"time":101,"elapsed":1.0,"version":1,"worker":0,"tau":0,"loss":1.5,"samples":10,"scale":1}
{"time":101,"elapsed":1.2,"version":2,"worker":1,"tau":1,"loss":1.0,"samples":20}
{"time":101,"elapsed":1.4,"version":3,"worker":2,"tau":2,"loss":0.5,"samples":30}
LOG

# data FILE: FILE without its comment lines and column headers.
data() { grep -v '^[#a-z]' "$1"; }

test_expect_success 'loss: per update, null loss left out, moving average over --smooth' '
	gem-plot-data --smooth 2 loss runA/log.jsonl >out 2>err &&
	grep -q "^# run: gem, 2 workers$" out &&
	grep -q "^version	samples	loss	loss_avg2$" out &&
	printf "1\t32\t4\t4\n2\t64\t2\t3\n3\t96\t6\t4\n5\t160\t3\t4.5\n" >want &&
	data out >got && diff want got
'

test_expect_success 'loss: the default window is 50 (a running mean here)' '
	gem-plot-data loss runA >out 2>/dev/null && data out | cut -f4 >got &&
	printf "4\n3\n4\n3.75\n" >want && diff want got
'

test_expect_success 'loss --by worker: one block per worker, per worker-step' '
	gem-plot-data --smooth 2 --by worker loss runA >out 2>/dev/null &&
	grep -q "^# worker 1$" out && grep -q "^# worker 2$" out &&
	grep -q "^step	version	loss	loss_avg2$" out &&
	printf "1\t1\t4\t4\n2\t3\t6\t5\n3\t5\t3\t4.5\n\n\n1\t2\t2\t2\n" >want &&
	data out >got && diff want got
'

test_expect_success 'staleness: tau, count, fraction' '
	gem-plot-data staleness runA >out 2>/dev/null &&
	grep -q "^tau	count	fraction$" out &&
	printf "0\t1\t0.2\n1\t3\t0.6\n2\t1\t0.2\n" >want && data out >got && diff want got
'

test_expect_success 'throughput: updates/s and samples/s over windows after the first update' '
	gem-plot-data throughput runA >out 2>/dev/null &&
	grep -q "^time	updates_per_s	samples_per_s$" out &&
	printf "1\t2\t64\n2\t1\t32\n3\t1\t32\n" >want && data out >got && diff want got &&
	gem-plot-data --window 2 throughput runA >out 2>/dev/null &&
	printf "2\t1.5\t48\n4\t0.5\t16\n" >want && data out >got && diff want got
'

test_expect_success 'workers: commits, samples, mean and max tau, mean loss, samples/s' '
	gem-plot-data workers runA >out 2>/dev/null &&
	grep -q "^worker	commits	samples	mean_tau	max_tau	mean_loss	samples_per_s$" out &&
	printf "1\t3\t96\t0.6667\t1\t4.33333\t36.9231\n2\t2\t64\t1.5000\t2\t2\t91.4286\n" >want &&
	data out >got && diff want got
'

test_expect_success 'pi: a matrix nonuniform of the chosen statistic, binned, tensors named' '
	gem-plot-data --stat mean --bins 2 pi runA >out 2>/dev/null &&
	grep -q "^# tensor 0: 0.weight$" out && grep -q "^# tensor 2: 2.weight$" out &&
	printf "2\t1.5\t4\n0\t2\t7\n1\t3\t8\n2\t4\t9\n" >want && data out >got && diff want got &&
	gem-plot-data pi runA >out 2>/dev/null &&
	data out | head -2 >got && printf "5\t1\t2\t3\t4\t5\n0\t0\t0\t0\t0\t0\n" >want && diff want got
'

test_expect_code 1 'pi on a log without pi says so and exits 1' '
	gem-plot-data pi runB 2>err; rc=$?; cat err; grep -q "rule gem" err; exit $rc'

test_expect_success 'malformed lines are reported with file and line number, and skipped' '
	gem-plot-data loss runA/log.jsonl >out 2>err &&
	grep -q "runA/log.jsonl:5: not JSON, skipped" err &&
	grep -q "runA/log.jsonl:7: .*tau.* skipped" err &&
	test $(wc -l <err) = 2
'

test_expect_success 'lines of every kind of wrong: never a crash, good lines kept' '
	{
		echo "{\"event\":\"start\",\"time\":1,\"tensors\":[\"a\",\"b\",\"c\"]}"
		echo "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}"
		echo "[1,2,3]"
		echo "42"
		echo "{\"version\":2}"
		echo "{\"time\":1,\"elapsed\":\"x\",\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":\"a\",\"samples\":16}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":5,\"loss\":1,\"samples\":16}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":-2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16,\"pi\":3}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16,\"pi\":{\"median\":[1,2]}}"
		echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":16,\"pi\":{\"median\":[1,\"x\",3]}}"
		echo "{\"event\":3}"
		echo "{\"time\":1,\"elapsed\":3,\"version\":3,\"worker\":0,\"tau\":0,\"loss\":0.5,\"samples\":24,\"pi\":{\"median\":[1,2,3]}}"
		printf "{\"time\":1,\"elapsed\":4,\"version\""
	} >bad.jsonl &&
	gem-plot-data staleness bad.jsonl >out 2>err &&
	printf "0\t5\t1\n" >want && data out >got && diff want got &&
	for n in 3 4 5 6 7 8 9 15; do grep -q "bad.jsonl:$n: " err || { echo "line $n"; return 1; }; done &&
	test $(wc -l <err) = 8 &&
	gem-plot-data pi bad.jsonl >out 2>err &&
	for n in 10 11 12; do grep -q "bad.jsonl:$n: .*pi" err || { echo "line $n"; return 1; }; done &&
	data out >got && printf "1\t3\n0\t1\n1\t2\n2\t3\n" >want && diff want got
'

test_expect_success 'pi: a start event naming too few tensors gives way to the pi arrays' '
	{
		echo "{\"event\":\"start\",\"time\":1,\"tensors\":[\"a\",\"b\"]}"
		echo "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8,\"pi\":{\"median\":[1,2,3]}}"
	} >cut.jsonl &&
	gem-plot-data pi cut.jsonl >out 2>err && grep -q "cut.jsonl:2: 3 pi values" err &&
	grep -q "^# tensor 1: b$" out && grep -q "^# tensor 2: tensor2$" out &&
	data out >got && printf "1\t1\n0\t1\n1\t2\n2\t3\n" >want && diff want got
'

test_expect_success 'a flood of bad lines is counted, not each shown' '
	for i in $(seq 100); do echo "garbage $i"; done >flood.jsonl &&
	cat runB/log.jsonl >>flood.jsonl &&
	gem-plot-data loss flood.jsonl >out 2>err &&
	test $(grep -c "not JSON" err) = 20 && grep -q "100 malformed lines" err
'

test_expect_code 1 'a log with no update lines: a clear message, exit 1' '
	mkdir -p empty && grep event runA/log.jsonl >empty/log.jsonl &&
	gem-plot-data loss empty 2>err; rc=$?; grep -q "no update lines" err; exit $rc'

test_expect_code 1 'an empty log from stdin: exit 1' 'gem-plot-data loss </dev/null'
test_expect_code 1 'a missing log: exit 1, named' '
	gem-plot-data loss nosuch/log.jsonl 2>err; rc=$?; grep -q nosuch err; exit $rc'

test_expect_success 'the log on stdin, and - for stdin' '
	gem-plot-data workers <runB/log.jsonl >out1 &&
	gem-plot-data workers - <runB/log.jsonl >out2 && diff out1 out2 &&
	grep -q "^# run: stdin$" out1 && test $(data out1 | wc -l) = 3
'

test_expect_success 'two runs: one block each, labelled by rule and workers' '
	gem-plot-data workers runA runB/log.jsonl >out 2>/dev/null &&
	grep -q "^# run: gem, 2 workers$" out && grep -q "^# run: downpour, 3 workers$" out &&
	awk "/^\$/{e++} END{exit e != 2}" out
'

test_expect_success 'a run without run.json is labelled by its file; equal labels get the path' '
	cp runB/log.jsonl plain.jsonl &&
	gem-plot-data loss plain.jsonl >out && grep -q "^# run: plain.jsonl$" out &&
	mkdir -p runC && cp runB/* runC/ &&
	gem-plot-data loss runB runC >out &&
	grep -q "^# run: downpour, 3 workers (runB/log.jsonl)$" out &&
	grep -q "^# run: downpour, 3 workers (runC/log.jsonl)$" out
'

test_expect_success '--gnuplot: a script with the data inline and a series per run' '
	gem-plot-data --gnuplot loss runA runB >s.gp 2>/dev/null &&
	grep -q "^\$data << EOD$" s.gp && grep -q "^EOD$" s.gp && grep -q "^plot " s.gp &&
	grep -q "title .gem, 2 workers." s.gp && grep -q "title .downpour, 3 workers." s.gp &&
	grep -q "set terminal pngcairo" s.gp
'

for view in loss pi staleness throughput workers; do
	test_expect_success "--gnuplot --term dumb $view runs in gnuplot" "
		gem-plot-data --term dumb $view runA >s.gp 2>/dev/null && gnuplot s.gp >plot.txt 2>gperr &&
		! grep -i error gperr && grep -q '+---' plot.txt
	"
done

test_expect_success '--gnuplot --term dumb loss --by worker, two runs' '
	gem-plot-data -T dumb --by worker loss runA runB 2>/dev/null | gnuplot >plot.txt 2>gperr &&
	! grep -i error gperr && grep -q "downpour, 3 workers: worker 2" plot.txt
'

test_expect_success '--gnuplot png makes a PNG, on stdout or with --output' '
	gem-plot-data --gnuplot --stat mean pi runA 2>/dev/null | gnuplot >pi.png &&
	test "$(head -c 8 pi.png | od -An -tx1 | tr -d " \n")" = 89504e470d0a1a0a &&
	gem-plot-data --output "it'"'"'s.png" staleness runA runB 2>/dev/null | gnuplot &&
	test "$(head -c 4 "it'"'"'s.png" | od -An -tx1 | tr -d " \n")" = 89504e47
'

test_expect_success '--term svg makes an SVG' '
	gem-plot-data -T svg throughput runA runB 2>/dev/null | gnuplot >t.svg && grep -q "<svg" t.svg
'

test_expect_success 'share/gem/plot: loss.gp and pi.gp plot gem-plot-data files' '
	gem-plot-data loss runA runB >loss.dat 2>/dev/null &&
	gnuplot -c "$GEM_SRC/share/gem/plot/loss.gp" loss.dat loss.png 2>gperr && ! grep -i error gperr &&
	test "$(head -c 4 loss.png | od -An -tx1 | tr -d " \n")" = 89504e47 &&
	gem-plot-data --stat mean pi runA >pi.dat 2>/dev/null &&
	gnuplot -c "$GEM_SRC/share/gem/plot/pi.gp" pi.dat pi2.png 2>gperr && ! grep -i error gperr &&
	test "$(head -c 4 pi2.png | od -An -tx1 | tr -d " \n")" = 89504e47
'

test_expect_success 'share/gem/plot/live.sh draws a gem-eval --follow stream until it ends' '
	printf "# elapsed\tversion\tsamples\ttest_loss\ttest_acc\n1\t10\t320\t2.1\t0.3\n2\t20\t640\t1.5\t0.5\n" |
	LIVE_EVERY=0.1 GNUTERM=dumb sh "$GEM_SRC/share/gem/plot/live.sh" - >live.txt 2>gperr &&
	! grep -i error gperr && grep -q "test accuracy" live.txt
'

# read_table FILE SEP COMMENT: the header and rows as pandas.read_csv(FILE, sep=SEP,
# comment=COMMENT) sees them (the csv module reads them the same way when pandas is missing).
cat >read_table.py <<'PY'
import sys
path, sep, comment = sys.argv[1], sys.argv[2], (sys.argv[3] or None)
try:
    import pandas
    t = pandas.read_csv(path, sep=sep, comment=comment, keep_default_na=False, dtype=str)
    rows = [list(r) for r in t.itertuples(index=False)]
    head = list(t.columns)
except ImportError:
    import csv
    lines = [l for l in open(path) if l.strip() and not (comment and l.startswith(comment))]
    r = list(csv.reader(lines, delimiter=sep))
    head, rows = r[0], r[1:]
print("|".join(head))
for row in rows:
    print("|".join(row))
PY

test_expect_success 'TSV: a plain header line first, so pandas reads clean column names' '
	gem-plot-data --smooth 2 loss runA >out 2>/dev/null &&
	head -1 out | grep -q "^version	samples	loss	loss_avg2$" &&
	python3 read_table.py out "	" "#" >got &&
	printf "version|samples|loss|loss_avg2\n1|32|4|4\n2|64|2|3\n3|96|6|4\n5|160|3|4.5\n" >want &&
	diff want got
'

test_expect_success '--csv: one table, a plain header row, the run first (quoted when it has a comma)' '
	gem-plot-data --csv --smooth 2 loss runA runB >out.csv 2>/dev/null &&
	head -1 out.csv | grep -q "^run,version,samples,loss,loss_avg2$" &&
	! grep -q "^#" out.csv &&
	python3 read_table.py out.csv , "" >got &&
	{
		echo "run|version|samples|loss|loss_avg2"
		data out | sed -n "1,4s/^/gem, 2 workers|/p" | tr "\t" "|"
		printf "downpour, 3 workers|1|10|1.5|1.5\ndownpour, 3 workers|2|20|1|1.25\n"
		echo "downpour, 3 workers|3|30|0.5|0.75"
	} >want && diff want got &&
	gem-plot-data --csv --smooth 2 --by worker loss runA >w.csv 2>/dev/null &&
	head -2 w.csv >got && printf "run,worker,step,version,loss,loss_avg2\n\"gem, 2 workers\",1,1,1,4,4\n" >want &&
	diff want got
'

test_expect_success '--json: one object per row, the same values, null for NaN' '
	gem-plot-data --json workers runA runB >w.json 2>/dev/null &&
	gem-plot-data workers runA runB >w.tsv 2>/dev/null &&
	printf "%s\n" "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":7,\"tau\":0,\"loss\":null,\"samples\":8}" >nl.jsonl &&
	gem-plot-data --json workers nl.jsonl >nl.json &&
	python3 -c "
import json
rows = [json.loads(l) for l in open(\"w.json\")]
tsv = [l.split(\"\t\") for l in open(\"w.tsv\").read().splitlines() if l[:1].isdigit()]
assert list(rows[0]) == [\"run\", \"worker\", \"commits\", \"samples\", \"mean_tau\", \"max_tau\",
                         \"mean_loss\", \"samples_per_s\"], rows[0]
assert [r[\"run\"] for r in rows] == [\"gem, 2 workers\"] * 2 + [\"downpour, 3 workers\"] * 3
assert len(rows) == len(tsv) == 5
for r, t in zip(rows, tsv):
    for k, x in zip(list(r)[1:], t):
        assert r[k] is None if x == \"nan\" else float(x) == float(r[k]), (r, t)
n = json.loads(open(\"nl.json\").read())
assert n[\"mean_loss\"] is None and n[\"worker\"] == 7, n
" &&
	gem-plot-data --json --stat mean --bins 2 pi runA 2>/dev/null | head -2 >got &&
	printf "%s\n" "{\"run\":\"gem, 2 workers\",\"version\":1.5,\"tensor\":\"0.weight\",\"value\":2}" \
		"{\"run\":\"gem, 2 workers\",\"version\":1.5,\"tensor\":\"0.bias\",\"value\":3}" >want &&
	diff want got
'

test_expect_success '--x samples and --x seconds: the loss view'"'"'s first column' '
	gem-plot-data --smooth 2 --x samples loss runA >out 2>/dev/null &&
	head -1 out | grep -q "^samples	version	loss	loss_avg2$" &&
	data out | head -2 >got && printf "32\t1\t4\t4\n64\t2\t2\t3\n" >want && diff want got &&
	gem-plot-data --smooth 2 --x seconds loss runA >out 2>/dev/null &&
	data out | cut -f1,2 | tail -1 >got && printf "12.600\t5\n" >want && diff want got &&
	gem-plot-data --x seconds --by worker loss runA 2>/dev/null | head -1 |
		grep -q "^seconds	step	loss	loss_avg50$" &&
	gem-plot-data --x samples -T dumb loss runA 2>/dev/null | grep -q "xlabel .training samples"
'

# Run C: a server's log with its bytes on the wire (those since the line before), a run resumed
test_expect_success '--x bytes: the loss against the bytes on the wire so far, across restarts' '
	mkdir -p runC && cp runA/run.json runC/ &&
	cat >runC/log.jsonl <<-\LOG &&
	{"event":"start","time":100,"rule":"gem","model":"tiny","tensors":["w"],"version":0}
	{"time":101,"elapsed":1.0,"version":1,"worker":0,"tau":0,"loss":3,"samples":8,"bytes_in":100,"bytes_out":1100}
	{"time":101,"elapsed":1.5,"version":2,"worker":0,"tau":0,"loss":2,"samples":16,"bytes_in":100,"bytes_out":100}
	{"event":"stop","time":102,"version":2,"reason":"stopped by a signal","bytes_in":0,"bytes_out":50}
	{"event":"start","time":103,"rule":"gem","model":"tiny","tensors":["w"],"version":2}
	{"time":104,"elapsed":2.0,"version":3,"worker":0,"tau":0,"loss":1,"samples":24,"bytes_in":100,"bytes_out":1100}
	LOG
	gem-plot-data --smooth 1 --x bytes loss runC >out 2>/dev/null &&
	head -1 out | grep -q "^bytes	version	loss	loss_avg1$" &&
	data out >got && printf "1200\t1\t3\t3\n1400\t2\t2\t2\n2650\t3\t1\t1\n" >want && diff want got &&
	gem-plot-data --x bytes -T dumb loss runC 2>/dev/null | grep -q "xlabel .bytes on the wire"
'

test_expect_success 'local runs are labelled "local", SGP node logs are read from the RUNDIR' '
	mkdir -p loc sgp &&
	cp runA/run.json loc/ && cp runA/run.json sgp/ &&
	{
		echo "{\"event\":\"start\",\"time\":1,\"rule\":\"local\",\"tensors\":[\"a\"]}"
		echo "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}"
	} >loc/log.jsonl &&
	gem-plot-data loss loc | grep -q "^# run: local$" &&
	for i in 0 1; do
		{
			echo "{\"event\":\"start\",\"time\":1,\"rule\":\"sgp\",\"tensors\":[\"a\"]}"
			echo "{\"event\":\"sgp\",\"node\":$i,\"nodes\":2,\"iters\":2}"
			echo "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":$i,\"tau\":0,\"loss\":$i,\"samples\":8}"
			echo "{\"time\":1,\"elapsed\":2,\"version\":2,\"worker\":$i,\"tau\":1,\"loss\":2,\"samples\":16}"
		} >sgp/node-$i.jsonl
	done &&
	gem-plot-data loss sgp/ >out 2>err && ! test -s err &&
	grep -q "^# run: sgp, node 0$" out && grep -q "^# run: sgp, node 1$" out &&
	data out >got && printf "1\t8\t0\t0\n2\t16\t2\t1\n\n\n1\t8\t1\t1\n2\t16\t2\t1.5\n" >want &&
	diff want got &&
	gem-plot-data staleness sgp/node-1.jsonl | grep -q "^# run: sgp, node 1$"
'

test_expect_success '--term dumb: pi as one line per tensor, staleness on a log scale, the key below' '
	gem-plot-data --term dumb --stat mean pi runA 2>/dev/null | gnuplot >pi.txt 2>gperr &&
	! grep -i error gperr && grep -q "0.weight" pi.txt && grep -q "2.weight" pi.txt &&
	gem-plot-data --term dumb staleness runA 2>/dev/null >st.gp &&
	grep -q "set logscale y" st.gp && grep -q "set key below" st.gp &&
	gnuplot st.gp >st.txt 2>gperr && ! grep -i error gperr &&
	grep -q "^ *0.1 +--" st.txt &&
	awk "/\+-----/ { border = NR } /gem, 2 workers/ { key = NR } END { exit !(key > border) }" st.txt &&
	gem-plot-data --term dumb workers runA 2>/dev/null | gnuplot >w.txt 2>gperr &&
	! grep -i error gperr &&
	awk "/\+-----/ { border = NR } /gem, 2 workers/ { key = NR } END { exit !(key > border) }" w.txt
'

test_expect_success 'a PNG is not written to a terminal: gnuplot stops with a message, status 2' '
	command -v script >/dev/null || { echo "# no script(1): skipped"; return 0; }
	gem-plot-data --gnuplot loss runA >png.gp 2>/dev/null &&
	{ script -qec "gnuplot png.gp" /dev/null >tty.out 2>&1; test $? = 2; } &&
	grep -q "not writing a PNG to a terminal" tty.out && ! grep -q "PNG.*IHDR" tty.out &&
	gnuplot png.gp >p.png &&
	test "$(head -c 4 p.png | od -An -tx1 | tr -d " \n")" = 89504e47 &&
	gem-plot-data -T svg loss runA 2>/dev/null | grep -qv "not writing"
'

test_expect_code 2 'an unknown view: exit 2 with a usage line' '
	gem-plot-data nosuch runA 2>err; rc=$?; grep -q "^usage: gem-plot-data" err && grep -q nosuch err; exit $rc'
test_expect_code 2 'a mistyped view: the valid ones and the closest' '
	gem-plot-data stalenes runA 2>err; rc=$?; cat err &&
	grep -q "did you mean staleness?" err && grep -q "valid: loss, pi, staleness, throughput, workers" err &&
	exit $rc'
test_expect_code 2 'no view: exit 2' 'gem-plot-data'
test_expect_code 2 'an unknown option: exit 2' 'gem-plot-data --no-such-option loss runA'
test_expect_code 2 'a bad --smooth: exit 2' 'gem-plot-data --smooth 0 loss runA'
test_expect_code 2 'a bad --bins: exit 2' 'gem-plot-data --bins x pi runA'
test_expect_code 2 'a bad --stat: exit 2' 'gem-plot-data --stat max pi runA'
test_expect_code 2 'a bad --by: exit 2' 'gem-plot-data --by tensor loss runA'
test_expect_code 2 'a bad --window: exit 2' 'gem-plot-data --window -1 throughput runA'
test_expect_code 2 'a bad --term: exit 2' 'gem-plot-data --term x11 loss runA'
test_expect_code 2 'a bad --x: exit 2' 'gem-plot-data --x steps loss runA'
test_expect_code 2 '--csv with --gnuplot: exit 2' 'gem-plot-data --csv --gnuplot loss runA'
test_expect_code 2 '--follow without a script: exit 2' 'gem-plot-data --follow loss runA'
test_expect_code 2 '--follow of stdin: exit 2' 'gem-plot-data --follow -T dumb loss - <runA/log.jsonl'
test_expect_code 2 'a bad --interval: exit 2' 'gem-plot-data --follow -T dumb --interval 0 loss runA'


test_expect_success '--help and --version' '
	gem-plot-data --help >out && grep -q "^usage: gem-plot-data" out &&
	gem-plot-data --version | grep -q "^gem-plot-data [0-9]"
'

test_expect_success 'every option --help prints is in the man page, and the other way round' '
	man="$GEM_SRC/man/man1/gem-plot-data.1" &&
	gem-plot-data --help | grep -o -- "--[a-z][a-z-]*" | sort -u >help-opts &&
	test -s help-opts &&
	sed "s/\\\\-/-/g" "$man" >man.txt &&
	while read -r o; do
		grep -q -- "$o\\b" man.txt || { echo "$o not in the man page"; return 1; }
	done <help-opts &&
	sed -n "/^\.SH OPTIONS/,/^\.SH /p" man.txt | grep -o -- "--[a-z][a-z-]*" |
		sort -u >man-opts &&
	diff help-opts man-opts
'

test_expect_success 'the man page renders without warnings' '
	groff -man -ww -z "$GEM_SRC/man/man1/gem-plot-data.1" 2>warn && ! test -s warn
'
test_expect_success 'a value that is not finite reads nan in TSV and CSV, as in every gem output' '
	printf "%s\n" "{\"time\":1,\"elapsed\":1,\"version\":1,\"worker\":7,\"tau\":0,\"loss\":null,\"samples\":8}" >nl.jsonl &&
	gem-plot-data workers nl.jsonl >nl.tsv && gem-plot-data --csv workers nl.jsonl >nl.csv &&
	cat nl.tsv nl.csv &&
	grep -q "	nan	" nl.tsv && grep -q ",nan," nl.csv && ! grep -q "NaN" nl.tsv nl.csv
'

test_expect_success 'an SGP run'"'"'s loss is over iterations (it has no server), not central updates' '
	gem-plot-data -T dumb loss sgp/ >sgp.gp && grep -q "^set xlabel '"'"'iterations'"'"'$" sgp.gp &&
	gem-plot-data -T dumb loss runA >a.gp && grep -q "^set xlabel '"'"'central updates (version)'"'"'$" a.gp
'

test_expect_success 'a reader that has gone: gem-plot-data ends quietly, even with SIGPIPE ignored' '
	python3 -c "
import os, subprocess, sys
r, w = os.pipe()
os.close(r)
# restore_signals=False: the child inherits Python'"'"'s SIGPIPE ignored, as from some parents
p = subprocess.run([\"gem-plot-data\", \"-T\", \"png\", \"loss\", \"runA\"], stdout=w,
                   stderr=subprocess.PIPE, restore_signals=False)
sys.stderr.write(p.stderr.decode())
sys.exit(0 if b\"writing the output\" not in p.stderr and p.returncode == -13 else 1)
"
'

# Run C (rule diloco, 4 workers): a round is one update line, of the worker whose commit
# closed it; the other three commits are "held" events. Two rounds, closed by workers 3 and 2;
# worker 1 left in the second round, which a leave closed.
mkdir -p runC
cat >runC/run.json <<'JSON'
{"rule": {"name": "diloco", "nworkers": 4}, "model_name": "tiny"}
JSON
cat >runC/log.jsonl <<'LOG'
{"event":"start","time":100,"rule":"diloco","model":"tiny","tensors":["0.weight"],"version":0}
{"event":"join","time":100,"worker":0,"version":0}
{"event":"join","time":100,"worker":1,"version":0}
{"event":"join","time":100,"worker":2,"version":0}
{"event":"join","time":100,"worker":3,"version":0}
{"event":"held","time":101,"worker":0,"version":0,"n":640}
{"event":"held","time":101,"worker":1,"version":0,"n":640}
{"event":"held","time":101,"worker":2,"version":0,"n":640}
{"time":102,"elapsed":10.0,"version":1,"worker":3,"tau":0,"loss":1.5,"samples":2560,"n":640}
{"event":"held","time":103,"worker":0,"version":1,"n":640}
{"event":"held","time":103,"worker":3,"version":1,"n":320}
{"time":104,"elapsed":20.0,"version":2,"worker":2,"tau":0,"loss":1.0,"samples":4160,"n":640}
{"event":"held","time":105,"worker":0,"version":2,"n":640}
{"time":106,"elapsed":25.0,"version":3,"worker":1,"tau":0,"loss":null,"samples":4800,"by":"leave"}
LOG

test_expect_success 'a rule with rounds: every worker counted and listed, not only the closers' '
	gem-plot-data loss runC >out 2>err && cat err && grep -q "^# run: diloco, 4 workers$" out &&
	gem-plot-data workers runC >out 2>err && cat err out &&
	printf "0\t3\t1920\tnan\tnan\tnan\t128\n1\t1\t640\tnan\tnan\tnan\tnan\n" >want &&
	printf "2\t2\t1280\t0.0000\t0\t1\t128\n3\t2\t960\t0.0000\t0\t1.5\t96\n" >>want &&
	data out >got && diff want got
'

test_done
