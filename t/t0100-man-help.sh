#!/bin/bash
# t0100: every program's --help, --version and bad usage follow the conventions, its --help
# and its man page list the same long options, and every man page renders without warnings
# and has the sections users expect.
. "$(dirname "$0")/test-lib.sh"

MAN="$GEM_SRC/man"
version=$(sed -n 's/^VERSION *= *//p' "$GEM_SRC/Makefile")

# man_norm PAGE: the page's roff with \- as - and font escapes removed, so that options read
# as they do in --help.
man_norm() { sed -e 's/\\-/-/g' -e 's/\\f[BIRP]//g' -e 's/\\f(..//g' -e 's/\\&//g' "$1"; }

# long_options: the --word tokens on stdin, sorted and unique.
long_options() { grep -o -- '--[a-zA-Z0-9][a-zA-Z0-9-]*' | sort -u; }

# man_option_tags PAGE: the long options named in the tags (.TP/.TQ lines) of OPTIONS.
man_option_tags() {
	man_norm "$1" | awk '
		/^\.SH / { in_opts = ($0 ~ /^\.SH "?OPTIONS"?$/); tag = 0; next }
		in_opts && tag { print; tag = 0; next }
		in_opts && /^\.(TP|TQ)/ { tag = 1 }' | long_options
}

# man_sections PAGE: the .SH headings, one per line, without quotes.
man_sections() { sed -n 's/^\.SH *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$1"; }

progs=
for p in "$GEM_BIN"/gem-*; do
	[ -x "$p" ] && progs="$progs $(basename "$p")"
done

test_expect_success 'there are programs to check' '
	test -n "$progs" && echo $progs | grep -q gem-run
'

for prog in $progs; do
	test_expect_success "$prog --help: exit 0, starts with usage: $prog" "
		$prog --help >help.out 2>help.err &&
		head -1 help.out | grep -q '^usage: $prog ' &&
		test ! -s help.err
	"

	test_expect_success "$prog --version prints '$prog $version'" "
		$prog --version >version.out &&
		echo '$prog $version' >version.want &&
		cmp version.want version.out
	"

	# one line saying what is wrong, then the usage line (and "   or:" lines, as git's)
	test_expect_success "$prog --no-such-option: the usage line on stderr, exit 2" "
		{ $prog --no-such-option </dev/null >bad.out 2>bad.err; test \$? = 2; } &&
		test ! -s bad.out &&
		test \$(grep -c '^usage: $prog ' bad.err) = 1 &&
		test \$(grep -vc '^   or: $prog ' bad.err) -le 2
	"

	page="$MAN/man1/$prog.1"
	test_expect_success "$prog has a man page in man1" "test -f '$page'"
	[ -f "$page" ] || continue

	test_expect_success "$prog: every long option of --help is in $prog.1" "
		$prog --help | long_options >help.opts &&
		man_norm '$page' | long_options >man.opts &&
		comm -23 help.opts man.opts >missing &&
		{ test ! -s missing || { echo 'in --help, not in the man page:'; cat missing; false; }; }
	"

	test_expect_success "$prog: every option of $prog.1's OPTIONS is in --help" "
		$prog --help | long_options >help.opts &&
		man_option_tags '$page' >man.tags &&
		test -s man.tags &&
		comm -13 help.opts man.tags >extra &&
		{ test ! -s extra || { echo 'in the man page, not in --help:'; cat extra; false; }; }
	"

	test_expect_success "$prog.1 is of version $version" "
		head -1 '$page' | grep -q '^\.TH .* \"gem $version\"'
	"
done

# glued_prose PAGE...: lines of the alternating-font macros (.BR, .IR, ...) with three plain
# words in a row among their unquoted arguments: roff sets those without spaces between
# them ("2onbadusage"), where prose was meant.
glued_prose() {
	awk '/^\.(BR|RB|BI|IB|IR|RI) / {
		line = $0; sub(/^\.[A-Z][A-Z] /, "", line); run = 0
		while (sub(/^ +/, "", line) >= 0 && line != "") {
			if (substr(line, 1, 1) == "\"") { match(line, /^"[^"]*"?/); q = 1 }
			else { match(line, /^[^ ]+/); q = 0 }
			tok = substr(line, 1, RLENGTH); line = substr(line, RLENGTH + 1)
			run = !q && tok ~ /^[A-Za-z0-9,.;:]+$/ && tok ~ /[A-Za-z0-9]/ ? run + 1 : 0
			if (run >= 3) { print FILENAME ":" FNR ": " $0; break }
		}
	}' "$@"
}

test_expect_success 'no man page glues prose words together in a font macro' '
	glued_prose "$MAN"/man*/*.* >glued &&
	{ test ! -s glued || { cat glued; false; }; }
'

for prog in $progs; do
	test_expect_success "$prog --help fits in 80 columns" "
		$prog --help >help.out &&
		python3 -c 'import sys
long = [l for l in open(\"help.out\", encoding=\"utf-8\").read().split(\"\\n\") if len(l) > 80]
print(\"\\n\".join(long)); sys.exit(bool(long))'
	"
done

test_expect_success 'make install installs every man page in its section' '
	make -s -n -C "$GEM_SRC" install PREFIX=/inst >install.cmds &&
	for page in "$MAN"/man*/*.*; do
		sect=$(basename "$(dirname "$page")") &&
		grep -q "^install .*man/$sect/$(basename "$page") .*/inst/share/man/$sect/\$" install.cmds ||
		{ echo "not installed: $page"; return 1; }
	done
'

for page in "$MAN"/man1/*.1 "$MAN"/man5/*.5 "$MAN"/man7/*.7; do
	name=$(basename "$page")
	test_expect_success "$name renders without warnings" "
		groff -man -ww -z '$page' >groff.out 2>&1 &&
		{ test ! -s groff.out || { cat groff.out; false; }; } &&
		if command -v man >/dev/null; then
			MANWIDTH=80 man --warnings -l '$page' 2>man.err >/dev/null &&
			{ test ! -s man.err || { cat man.err; false; }; }
		fi
	"

	case $name in
	*.1) want='NAME SYNOPSIS DESCRIPTION OPTIONS EXIT_STATUS ENVIRONMENT FILES EXAMPLES SEE_ALSO' ;;
	*) want='NAME DESCRIPTION EXAMPLES SEE_ALSO' ;;
	esac
	test_expect_success "$name has the sections ${want//_/ }" "
		man_sections '$page' | tr ' ' _ >sections &&
		: >absent &&
		for s in $want; do
			grep -qx \"\$s\" sections || echo \"no section \$s\" >>absent
		done &&
		{ test ! -s absent || { cat absent; false; }; }
	"

	test_expect_success "$name: NAME starts with the page's name" "
		sed -n '/^\.SH NAME/{n;p;q}' '$page' | grep -q '^${name%.*} \\\\- '
	"
done

test_done
