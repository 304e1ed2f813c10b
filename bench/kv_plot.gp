# Plots of bench/kv_sweep.sh's data (bench/README.md, kv_sweep):
#   gnuplot -e "dir='build/bench-results'" bench/kv_plot.gp
# reads DIR/kv_sweep_keys.dat and DIR/kv_sweep_occ.dat (either may be
# missing) and writes DIR/kv_keys.png (uniform read-only lookups/s per core
# against key count) and DIR/kv_occ.png (the same against occupancy, with
# the one-sided reads per lookup on the right axis). goal (default 5, in M
# lookups/s per core; 0: none) draws the target line.
# Key counts are kv_bench's: M = 2^20, k = 2^10.
if (!exists("dir")) dir = "build/bench-results"
if (!exists("goal")) goal = 5
kdat = dir . "/kv_sweep_keys.dat"
odat = dir . "/kv_sweep_occ.dat"
have(f) = system("test -s '" . f . "' && grep -qv '^#' '" . f . "' && echo 1 || echo 0") + 0
Mi = 1048576.0

set terminal pngcairo size 900,600 enhanced font ",11"
set grid
set key bottom right
set ylabel "M lookups/s per core (uniform, read-only)"
if (goal > 0) {
	set arrow 1 from graph 0, first goal to graph 1, first goal nohead \
	    dt 2 lw 2 lc rgb "black"
	set label 1 sprintf("goal: %g M lookups/s per core", goal) \
	    at graph 0.02, first goal offset 0, 0.7
}

if (have(kdat)) {
	set autoscale
	stats kdat using 2 nooutput
	occ = STATS_min
	stats kdat using ($3 / 1e6) nooutput
	set yrange [0:1.15 * (goal > STATS_max ? goal : STATS_max)]
	set output dir . "/kv_keys.png"
	set title sprintf("KV store: lookups/s per core against key count (%.0f%% occupancy, 16 B keys, 32 B values)", 100 * occ)
	set xlabel "keys (M = 2^{20})"
	set logscale x
	set xrange [*:*]
	plot kdat using ($1 / Mi):($3 / 1e6):xtic(sprintf("%.3g M", $1 / Mi)) \
	       with linespoints lw 2 pt 7 title "libfarm kv (kv\\_bench uniform C)"
	unset logscale x
}

if (have(odat)) {
	set autoscale
	stats odat using 1 nooutput
	nk = STATS_min
	stats odat using ($3 / 1e6) nooutput
	set yrange [0:1.15 * (goal > STATS_max ? goal : STATS_max)]
	set output dir . "/kv_occ.png"
	set title sprintf("KV store: lookups/s per core against occupancy (%.3g M keys, 16 B keys, 32 B values)", nk / Mi)
	set xlabel "occupancy (%)"
	set xrange [*:*]
	set xtics auto
	set y2label "one-sided reads per lookup"
	set y2tics
	set ytics nomirror
	set y2range [0.99:*]
	plot odat using ($2 * 100):($3 / 1e6) with linespoints lw 2 pt 7 \
	       title "lookups/s per core", \
	     odat using ($2 * 100):4 axes x1y2 with linespoints lw 1 dt 3 \
	       pt 6 title "reads per lookup (right axis)"
}
