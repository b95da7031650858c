#!/bin/bash
# t5301: every shell example of README.md and of the man pages' EXAMPLES sections works when
# pasted into a script. Each runs in a directory of its own, under bash -e, with share/gem's
# cnn and mlp and the dataset fashion-mnist (and ~/data/mnist) replaced by the tiny ones. A
# "$ " example is one command per prompt (the lines after it are its output); any other block
# is one script. Examples that read a run/ find one made for them: served with gem (π in its
# log), SGP with --nodes, and saved/params-1000.gem. Skipped, with the reason printed: what
# needs ssh, Slurm or other hosts (t3400 and t5300 run gem-run --hosts, ssh.sh and slurm.sh
# with fakes), fixed ports (:7470), gem-eval following a server while it trains, make (make
# demo, make check and make install install packages or programs), and an external model's
# program, the user's (t5900 and t5901 run gem's own children).
. "$(dirname "$0")/test-lib.sh"

test_expect_success 'setup: tiny models, data and runs in place of the real ones' '
	make_tiny_data datasets/fashion-mnist &&
	mkdir -p home/data && cp -r datasets/fashion-mnist home/data/mnist &&
	cp -r "$GEM_SHARE_DIR" share &&
	cp tiny.json share/models/cnn.json && cp tiny.json share/models/mlp.json &&
	GEM_SHARE_DIR=$PWD/share GEM_DATA_PATH=$PWD/datasets HOME=$PWD/home GNUTERM=dumb &&
	export GEM_SHARE_DIR GEM_DATA_PATH HOME GNUTERM &&
	gem-run -q -n 2 --batch 32 served/run >/dev/null &&
	mkdir served/saved && cp served/run/params.gem served/saved/params-1000.gem &&
	cp -r served/run served/runA && cp -r served/run served/runB &&
	gem-run -q -n 2 --rule sgp --batch 32 sgp/run >/dev/null
'

python3 - "$GEM_SRC" >examples.list <<'PY'
import os, re, sys
src = sys.argv[1]
snips = []  # (source, text)

def roff(line):
    return (line.replace('\\-', '-').replace('\\e', '\\').replace('\\(*p', 'pi')
            .replace('\\(aq', "'").replace('\\(dq', '"'))

skips = [
    (r'\bssh\b|--hosts|srun|#SBATCH', 'needs ssh, Slurm or other hosts'),
    (r':7470|https?://[a-z]:', 'a fixed port, or other hosts'),
    (r'gem-eval.*server\.url\)|--follow|live\.sh', 'follows a server while it runs'),
    (r'^make\b', 'runs make: installs packages or programs'),
    (r'"input": \[1, 28, 28\]', 'a spec for 28x28 images (the tiny dataset is 8x8)'),
    (r'-d kjv|--data kjv', 'trains the gpt on kjv: minutes, and kjv is not replaced'),
    (r'exec:|import torch|gem_exec', 'an external model: a program of the user (t5900, t5901 run them)'),
]
def skipped(text):
    return next((w for p, w in skips if re.search(p, text, re.M)), '-')

for sect in ('man1', 'man5', 'man7'):
    d = os.path.join(src, 'man', sect)
    for name in sorted(os.listdir(d)):
        ex = in_ex = False
        block = []
        for line in open(os.path.join(d, name)):
            line = line.rstrip('\n')
            if line.startswith('.SH'):
                ex = line.split()[1:2] in (['EXAMPLES'], ['EXAMPLE']) or 'gem.7' == name
            elif ex and line == '.EX':
                in_ex, block = True, []
            elif in_ex and line == '.EE':
                in_ex = False
                lines = [roff(l) for l in block]
                if any(l.startswith('$ ') for l in lines):
                    # the commands, with their continuation lines; not their output
                    cmds, cont = [], False
                    for l in lines:
                        if cont:
                            cmds[-1] += '\n' + l
                        elif l.startswith('$ '):
                            cmds.append(l[2:])
                        if l.startswith('$ ') or cont:
                            cont = bool(re.search(r'[|\\]\s*$', l))
                    # a command that cannot run here is skipped alone (after the others)
                    keep = [c for c in cmds if skipped(c) == '-']
                    if keep:
                        snips.append((name, '\n'.join(keep)))
                    snips.extend((name, c) for c in cmds if skipped(c) != '-')
                else:
                    snips.append((name, '\n'.join(lines)))
            elif in_ex:
                block.append(line)

# README.md: the indented code blocks
lines = open(os.path.join(src, 'README.md')).read().split('\n')
block, prev = [], ''
for l in lines + ['']:
    if l.startswith('    ') and (block or prev == ''):
        block.append(l[4:])
    else:
        if block:
            snips.append(('README.md', '\n'.join(block)))
        block = []
    prev = l

for i, (where, text) in enumerate(snips):
    why = skipped(text)
    if re.search(r'\bgem-(init|run|sim)\b', text):
        prep = 'none'
    elif '--nodes' in text:
        prep = 'sgp'
    else:
        prep = 'served'
    with open('ex-%02d.sh' % i, 'w') as f:
        f.write(text + '\n')
    print('%02d\t%s\t%s\t%s\t%s' % (i, where, prep, why, text.split('\n')[0][:60]))
PY

test_expect_success 'the examples were found: the README and every man page with EXAMPLES' '
	cut -f 2 examples.list | sort -u >pages && cat pages &&
	for p in README.md gem-eval.1 gem-init.1 gem-plot-data.1 gem-run.1 gem-serve.1 gem-sim.1 \
		gem-work.1 gem.7; do grep -qx "$p" pages || return 1; done &&
	test "$(awk -F "\t" "\$4 == \"-\"" examples.list | wc -l)" -ge 15
'

while IFS='	' read -r n where prep why first; do
	if [ "$why" != - ]; then
		echo "# skip $where: $first ($why)"
		continue
	fi
	test_expect_success "$where: $first" '
		mkdir ex$n && { [ $prep = none ] || cp -r $prep/. ex$n/; } &&
		(cd ex$n && timeout 60 bash -e -o pipefail ../ex-$n.sh >out 2>err); rc=$?;
		cat ex$n/err && echo "exit $rc" && test $rc = 0 &&
		! grep -q "No such file\|command not found\|usage:" ex$n/err
	'
done <examples.list

test_done
