# SPDX-License-Identifier: BSD-3-Clause
# Latency distributions of bench case 4, one CDF per configuration.
# Run by bench.sh in the results directory: summarize.py writes
# plotcmd.gp there with the curves that exist.
#   gnuplot -e "outfile='latency.svg'" latency.gp

if (!exists("outfile")) outfile = 'latency.svg'
set terminal svg size 1200,500 dynamic font 'sans,11'
set output outfile
set logscale x
set xlabel 'latency (ms, log scale)'
set ylabel 'fraction of requests at or below'
set yrange [0:1.02]
set grid
set key top left
set style data steps
set linetype 1 lw 2
set linetype 2 lw 2
set linetype 3 lw 2
set linetype 4 lw 2
# The CDF files hold microseconds.
set xtics format '%g'
set format x '%g'
load 'plotcmd.gp'
