# Plot of one recovery_bench run (bench/README.md, recovery_bench): the
# survivors' throughput in 1 ms buckets around the kill, with the steps of
# the recovery timeline (FaRM SOSP'15 Figure 9). recovery_bench runs it:
#   gnuplot -e "dat='D/recovery_timeline.dat'; ev='D/recovery_events.dat'; \
#               png='D/recovery_timeline.png'; pre=12.3" bench/recovery_plot.gp
# dat: ms after the kill, operations, transfers (per 1 ms bucket), the
# operations' 10 ms moving mean;
# ev: "name" ms after the kill; pre: the pre-failure operations per ms.
if (!exists("dat")) dat = "build/bench-results/recovery_timeline.dat"
if (!exists("ev")) ev = "build/bench-results/recovery_events.dat"
if (!exists("png")) png = "build/bench-results/recovery_timeline.png"
if (!exists("pre")) pre = 0

set terminal pngcairo size 1000,560 enhanced font ",11"
set output png
set title "Survivors' throughput around the kill (1 ms buckets; vertical lines: recovery steps)"
set xlabel "ms after the kill"
set ylabel "operations per ms"
set grid
set key top right opaque
# (stats on one column filters by the y range: before any yrange)
stats dat using 1 nooutput
set xrange [STATS_min:STATS_max]
stats dat using 2 nooutput
ymax = STATS_max * 1.15
set yrange [0:ymax]
plot dat using 1:2 with steps lw 1 lc rgb "#1f77b4" title "operations (transfers + lookups)", \
     dat using 1:3 with steps lw 1 lc rgb "#2ca02c" title "transfers", \
     dat using 1:4 with lines lw 3 lc rgb "#000000" title "operations, 10 ms mean", \
     pre with lines dt 2 lc rgb "#555555" title "pre-failure", \
     0.8 * pre with lines dt 3 lc rgb "#d62728" title "80% of pre-failure", \
     ev using 2:(ymax) with impulses lc rgb "#ff7f0e" notitle, \
     ev using 2:(ymax * 0.97):1 with labels rotate by 90 right offset 0.8,0 font ",9" notitle
