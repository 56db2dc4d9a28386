#!/usr/bin/env bash
# Draws docs/benchmarks.png from the plot data scripts/bench_report.py writes
# (plot.dat, plot_pipeline.dat, plot_targets.dat in RESULTS_DIR): the
# scoped-timer cost, pipeline efficiency and the performance targets.
#
# usage: scripts/bench_plot.sh RESULTS_DIR [OUT_PNG=docs/benchmarks.png]
set -euo pipefail
results=${1:?usage: scripts/bench_plot.sh RESULTS_DIR [OUT_PNG]}
out=${2:-docs/benchmarks.png}
command -v gnuplot >/dev/null || { echo "bench_plot.sh: gnuplot not found (scripts/setup.sh installs it)" >&2; exit 2; }
[[ -s $results/plot.dat ]] || { echo "bench_plot.sh: no $results/plot.dat: run scripts/bench.sh first" >&2; exit 2; }
pipeline_plot="" targets_plot=""
[[ -s $results/plot_pipeline.dat ]] &&
  pipeline_plot="set title 'Pipeline efficiency: measured / slowest-stage bound; example profiled / plain';
    set xtics norotate; set yrange [0:1.1]; plot '$results/plot_pipeline.dat' using 0:2:xtic(1) with boxes lc rgb '#5a9e4b'"
[[ -s $results/plot_targets.dat ]] &&
  targets_plot="set title 'Performance targets: dflash / anchor, median of interleaved rounds (see the table for targets)';
    set xtics noenhanced norotate font ',9'; set logscale y 10; set yrange [0.01:*];
    plot '$results/plot_targets.dat' using 0:2:xtic(1) with boxes lc rgb '#b5562f'; unset logscale y"
gnuplot -e "set terminal pngcairo size 1000,1150 font ',10'; set output '$out';
  set multiplot layout 3,1; set style fill solid 0.8; set boxwidth 0.6; set grid ytics; unset key;
  set xtics noenhanced rotate by -20; set title 'Scoped-timer cost as a ratio to a bare pair of clock reads (same run)';
  set yrange [0:*]; plot '$results/plot.dat' using 0:2:xtic(1) with boxes lc rgb '#3b6ea5';
  $pipeline_plot; $targets_plot; unset multiplot"
