# loss.gp: the training loss of one or more runs, from a file `gem-plot-data loss` wrote.
#
#   gem-plot-data loss runA runB > loss.dat
#   gnuplot -p -c share/gem/plot/loss.gp loss.dat            # on screen
#   gnuplot -c share/gem/plot/loss.gp loss.dat loss.png      # to a PNG file
#
# One line per run: the moving average (column 4) over the first column (central updates,
# or what `--x` chose: the header line names it), titled by the block's "# run: " comment.
# For `--by worker` data use `gem-plot-data --gnuplot`.
file = ARGC >= 1 ? ARG1 : 'loss.dat'
if (ARGC >= 2) { set terminal pngcairo size 1024,640 noenhanced; set output ARG2 }
set termoption noenhanced
stats file using 1 nooutput
nblocks = STATS_blocks
label(i) = system(sprintf("sed -n 's/^# run: //p' '%s' | sed -n %dp", file, i + 1))
set title 'training loss (moving average)'
xname = system(sprintf("head -1 '%s' | cut -f1", file))
set xlabel (xname eq 'version' ? 'central updates (version)' : 'training '.xname)
set ylabel 'training loss'
set grid
set key below
plot for [i=0:nblocks-1] file index i using 1:4 with lines lw 2 title label(i)
