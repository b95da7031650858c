# pi.gp: GEM's pi per parameter tensor over updates (the paper's Figs. 9 and 10), from a
# file `gem-plot-data pi` wrote (gnuplot's "matrix nonuniform" layout, one block per run).
#
#   gem-plot-data --stat mean pi run > pi.dat
#   gnuplot -p -c share/gem/plot/pi.gp pi.dat            # on screen
#   gnuplot -c share/gem/plot/pi.gp pi.dat pi.png        # to a PNG file
#
# The tensor names come from the "# tensor i: name" comments (of the first run), the titles
# from the "# run: " comments; several runs make one picture each, stacked.
file = ARGC >= 1 ? ARG1 : 'pi.dat'
stats file using 1 nooutput
nblocks = STATS_blocks
if (ARGC >= 2) { set terminal pngcairo size 1024,360*nblocks noenhanced; set output ARG2 }
set termoption noenhanced
label(i) = system(sprintf("sed -n 's/^# run: //p' '%s' | sed -n %dp", file, i + 1))
what = system(sprintf("sed -n 's/^# \\([a-z]*\\) pi per tensor.*/\\1/p' '%s' | sed -n 1p", file))
tics = system(sprintf("sed -n '/^$/q; s/^# tensor \\([0-9]*\\): \\(.*\\)/\"\\2\" \\1,/p' '%s' | tr -d '\\n'", file))
eval "set ytics (" . tics[1:strlen(tics)-1] . ")"
set xlabel 'central updates (version)'
set autoscale xfix
set autoscale yfix
set cbrange [0:*]
set palette rgbformulae 33,13,10
if (nblocks > 1) { set multiplot layout nblocks,1 }
do for [i=0:nblocks-1] {
	set title sprintf("%s pi per tensor: %s", what, label(i))
	plot file index i matrix nonuniform with image notitle
}
if (nblocks > 1) { unset multiplot }
