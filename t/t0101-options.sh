#!/bin/bash
# t0101: a short option means one thing across the suite: no letter stands for two long
# options in two programs' --help, every letter a program parses is in its --help, and
# doc/options.md lists exactly the short options the programs have.
. "$(dirname "$0")/test-lib.sh"

DOC="$GEM_SRC/doc/options.md"

progs=
for p in "$GEM_BIN"/gem-*; do
	[ -x "$p" ] && progs="$progs $(basename "$p")"
done

# help_shorts PROG: "PROG -x --long" for each "  -x, --long" line of PROG --help.
help_shorts() {
	"$1" --help | sed -n 's/^ *\(-[a-zA-Z]\), \(--[a-zA-Z0-9-]*\).*/\1 \2/p' | sed "s/^/$1 /"
}

# source_letters PROG: the short letters PROG's source parses, one per line: the optstring
# of getopt_long in cmd/PROG.c (every program is C).
source_letters() {
	test -f "$GEM_SRC/cmd/$1.c" &&
	{ sed -n 's/.*getopt_long([^"]*"\([^"]*\)".*/\1/p' "$GEM_SRC/cmd/$1.c"
	  sed -n 's/.*shortopts\[\] = "\([^"]*\)".*/\1/p' "$GEM_SRC/cmd/$1.c"; } |
		tr -d ':\n' | fold -w1 | sed 's/^/-/' | sort -u
}

test_expect_success 'every program lists its short options' '
	: >all &&
	for p in $progs; do help_shorts $p >>all || return 1; done &&
	test $(wc -l <all) -ge 20
'

test_expect_success 'no short letter stands for two long options' '
	awk "{ print \$2, \$3 }" all | sort -u >pairs &&
	awk "{ print \$1 }" pairs | uniq -d >clash &&
	{ test ! -s clash || { for l in $(cat clash); do grep -h -- "^[^ ]* $l " all; done; false; }; }
'

test_expect_success 'no long option has two short letters' '
	awk "{ print \$2 }" pairs | sort | uniq -d >clash2 &&
	{ test ! -s clash2 || { cat clash2; false; }; }
'

for prog in $progs; do
	test_expect_success "$prog parses exactly the short options of its --help" "
		help_shorts $prog | awk '{ print \$2 }' | sort -u >help.letters &&
		source_letters $prog >src.letters &&
		test -s src.letters &&
		{ cmp -s help.letters src.letters || { diff help.letters src.letters; false; }; }
	"
done

# doc/options.md's table: | `-x` | `--long` | programs |
doc_rows() { sed -n 's/^| `\(-[a-zA-Z]\)` | `\(--[a-z0-9-]*\)` | \(.*\) |$/\1 \2 \3/p' "$DOC"; }

test_expect_success 'doc/options.md lists every short option of every program' '
	doc_rows >doc.rows &&
	test -s doc.rows &&
	while read -r p s l; do
		grep -q -- "^$s $l .*\b$p\b" doc.rows || echo "$p $s $l: not in doc/options.md"
	done <all >missing &&
	{ test ! -s missing || { cat missing; false; }; }
'

test_expect_success 'doc/options.md lists no short option a program lacks' '
	: >extra &&
	while read -r s l ps; do
		for p in $(echo "$ps" | tr -d ",\`"); do
			grep -q -- "^$p $s $l\$" all || echo "$p $s $l: in doc/options.md only"
		done
	done <doc.rows >extra &&
	{ test ! -s extra || { cat extra; false; }; }
'

test_expect_success 'a letter given up is refused, not taken for something else' '
	{ gem-eval -f http://127.0.0.1:1 2>err; test $? = 2; } &&
	{ gem-work -l run 2>err; test $? = 2; } &&
	{ gem-plot-data -s 5 loss 2>err; test $? = 2; }
'

test_expect_success 'gem-plot-data --window is --time-window, with a warning' '
	for v in 1 2 3 4 5; do
		echo "{\"time\":$v,\"elapsed\":$v,\"version\":$v,\"worker\":0,\"tau\":0,\"loss\":1,\"samples\":8}"
	done >log.jsonl &&
	gem-plot-data --time-window 2 throughput log.jsonl >new.out 2>new.err &&
	gem-plot-data --window 2 throughput log.jsonl >old.out 2>old.err &&
	gem-plot-data --time-window 1 throughput log.jsonl >one.out &&
	! cmp -s new.out one.out &&
	cmp new.out old.out &&
	! grep -q deprecated new.err &&
	grep -q "deprecated.*--time-window" old.err
'

for prog in $progs; do
	test_expect_success "$prog takes -q and --quiet" "
		$prog -q --version >v1 && $prog --quiet --version >v2 && cmp v1 v2
	"
	test_expect_success "$prog: a GEM_LOG that is no level is an error naming the levels" "
		{ GEM_LOG=verbose $prog --version >out 2>err; test \$? = 2; } &&
		grep -q 'GEM_LOG.*verbose.*debug, info, warn, error' err &&
		{ GEM_LOG=wran $prog --version >out 2>err; test \$? = 2; } &&
		grep -q 'did you mean warn' err &&
		GEM_LOG= $prog --version >out && GEM_LOG=warn $prog --version >out
	"
done

test_expect_success 'gem-serve -q writes no informational line' '
	make_tiny_data data &&
	gem-init -q --model tiny.json --data data run &&
	for q in "" -q; do
		gem-serve $q --listen 127.0.0.1:0 --idle-timeout 0 run >out$q 2>err$q &
		pid=$! &&
		wait_for_file run/server.url &&
		kill -TERM $pid && { wait $pid; true; } || return 1
	done &&
	grep -q "serving" err && ! grep -q . err-q && test -s out-q
'

test_done
