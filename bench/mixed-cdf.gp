# SPDX-License-Identifier: BSD-3-Clause
# Latency distributions of bench case 2m (4K and 1M writes mixed, fio):
# one CDF per configuration, one panel per write size.  Run by bench.sh
# in the results directory: summarize.py writes plotcmd-mixed.gp there
# with the curves that exist (latencies in ms, pooled over rounds).
#   gnuplot -e "outfile='mixed-cdf.svg'" mixed-cdf.gp

if (!exists("outfile")) outfile = 'mixed-cdf.svg'
set terminal svg size 1200,500 dynamic font 'sans,11'
set output outfile
set logscale x
set xlabel 'completion latency (ms, log scale)'
set ylabel 'fraction of writes at or below'
set yrange [0:1.02]
set grid
set key below
set style data steps
set linetype 1 lw 2
set linetype 2 lw 2
set linetype 3 lw 1 dt 2
set format x '%g'
load 'plotcmd-mixed.gp'
