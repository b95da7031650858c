#!/bin/sh
# live.sh: redraw a run's test loss and accuracy while it trains.
#
#   sh share/gem/plot/live.sh run/                              # runs gem-eval --follow run/
#   sh share/gem/plot/live.sh "$(cat run/server.url)"          # or a server by its URL
#   gem-eval --follow URL | sh share/gem/plot/live.sh -        # or reads that stream
#   GNUTERM=dumb sh share/gem/plot/live.sh URL                 # text plot, over ssh
#
# gem-eval --follow prints one TSV line per new version (elapsed, version, samples,
# test_loss, test_acc, then any columns its options add) until the server stops. This script appends the stream to a temporary file and has gnuplot
# replot the file every LIVE_EVERY seconds (default 2) until the stream ends; gnuplot's
# default terminal is used, or the one GNUTERM names. Interrupt it to stop.
set -u
src=${1:--}
every=${LIVE_EVERY:-2}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gem-live.XXXXXX") || exit 1
dat=$tmp/eval.tsv
trap 'rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM

# The producer: the stream into the file, then a marker when it ends.
# (A background job's stdin is /dev/null unless redirected: hand it ours as fd 3.)
if [ "$src" = - ]; then
	exec 3<&0
	{ cat <&3; touch "$tmp/done"; } >"$dat" &
else
	{ gem-eval --follow "$src"; touch "$tmp/done"; } >"$dat" &
fi

# gnuplot cannot plot a file without data: wait for the first line.
until grep -q '^[^#]' "$dat" 2>/dev/null; do
	[ -e "$tmp/done" ] && ! grep -q '^[^#]' "$dat" && { echo "live.sh: no data from $src" >&2; exit 1; }
	sleep 0.2
done

gnuplot -persist <<GP
set title 'test loss and accuracy'
set xlabel 'training seconds'
set ylabel 'test loss'
set y2label 'test accuracy'
set ytics nomirror
set y2tics
set grid
set key bottom left
done = 0
while (!done) {
	done = int(system("[ -e '$tmp/done' ] && echo 1 || echo 0"))
	plot '$dat' using 1:4 with linespoints title 'test loss', \
	     '' using 1:5 axes x1y2 with linespoints title 'test accuracy'
	if (!done) { pause $every }
}
GP
