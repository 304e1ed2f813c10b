# Plots of ht_bench's data (bench/README.md, ht_bench):
#   gnuplot -e "dir='build/bench-results'" bench/ht_plot.gp
# reads DIR/ht_bench.dat and DIR/ht_bench_90.dat (written by ht_bench) and
# writes DIR/ht_reads.png (reads per lookup against occupancy, per H),
# DIR/ht_space.png (space utilization against occupancy, a panel per H, a
# line per value size) and DIR/ht_space_90.png (space utilization against
# value size at 90% occupancy, per H: the analogue of the FaRM paper's
# Figure 11). Hs, Vs and rv (the value size of the reads plot) may be set
# with -e to match a run with other --H / --values.
if (!exists("dir")) dir = "build/bench-results"
if (!exists("Hs")) Hs = "2 4 6 8"
if (!exists("Vs")) Vs = "8 16 32 64 128 256 512"
if (!exists("rv")) rv = 32
dat = dir . "/ht_bench.dat"
dat90 = dir . "/ht_bench_90.dat"

set terminal pngcairo size 900,600 enhanced font ",11"
set grid
set key top left

# Reads per lookup do not depend on the value size (values inline): one
# value size stands for all.
set output dir . "/ht_reads.png"
set title sprintf("Hashtable: one-sided reads per lookup (16-byte keys, %d-byte values inline)", rv)
set xlabel "occupancy (%)"
set ylabel "reads per lookup"
set xrange [45:100]
set yrange [0.97:*]
set label 1 "black dot: FaRM paper, 1.04 reads at 90%, H = 8" at graph 0.4, graph 0.04
plot for [H in Hs] dat using 3:(($1 == H+0 && $2 == rv) ? $4 : 1/0) \
       with linespoints lw 2 title sprintf("H = %s", H), \
     '+' using (90):(1.04) every ::0::0 with points pt 7 ps 2 lc rgb "black" \
       notitle
unset label 1

set output dir . "/ht_space.png"
set terminal pngcairo size 1200,900 enhanced font ",10"
unset title
set multiplot layout 2,2 title "Hashtable: space utilization (key+value bytes / table bytes), 16-byte keys, values inline"
set yrange [0:1]
set key top left font ",9"
set ylabel "space utilization"
do for [H in Hs] {
	set title sprintf("H = %s", H)
	plot for [V in Vs] dat using 3:(($1 == H+0 && $2 == V+0) ? $5 : 1/0) \
	       with linespoints lw 2 title sprintf("%s B", V)
}
unset multiplot

set terminal pngcairo size 900,600 enhanced font ",11"
set output dir . "/ht_space_90.png"
set title "Hashtable: space utilization at 90% occupancy (16-byte keys, values inline)"
set xlabel "value size (bytes)"
set ylabel "space utilization"
set logscale x 2
set xrange [*:*]
set yrange [0:1]
set key top left
plot for [H in Hs] dat90 using 2:(($1 == H+0) ? $4 : 1/0) \
       with linespoints lw 2 title sprintf("H = %s", H)
unset logscale x
