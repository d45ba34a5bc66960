# SPDX-License-Identifier: BSD-3-Clause
# Case 5 of bench.sh: the effective capacity over time under a latency
# target, and the reader's latency distribution per configuration.
# Run by bench.sh in the results directory: summarize.py writes
# adaptcmd.gp there with the curves that exist.
#   gnuplot -e "outfile='adapt.svg'" adapt.gp

if (!exists("outfile")) outfile = 'adapt.svg'
set terminal svg size 1200,500 dynamic font 'sans,11'
set output outfile
set grid
set key bottom right
set linetype 1 lw 2
set linetype 2 lw 2
set linetype 3 lw 2
set linetype 4 lw 2
set xtics format '%g'
load 'adaptcmd.gp'
