#!/usr/bin/env bash
# Runs every benchmark binary of a build and writes docs/benchmarks.md (tables,
# ratios) and docs/benchmarks.png (gnuplot). Benchmarks are not tests.
#
# usage: scripts/bench.sh [BUILD_DIR=build/release] [MIN_TIME=0.3]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/release}
min_time=${2:-0.3}
results=$build/bench-results
rm -rf "$results" && mkdir -p "$results"
cmake --build "$build"

# Google Benchmark binaries: everything under benchmarks/ except the zero-cost
# variants (those are callgrind subjects, see scripts/zero_cost_check.sh).
while IFS= read -r exe; do
  name=$(basename "$exe")
  echo "== $name"
  "$exe" --benchmark_min_time="$min_time" --benchmark_out="$results/$name.json" \
    --benchmark_out_format=json | tee "$results/$name.txt"
done < <(find "$build/benchmarks" -type f -executable ! -name 'zero_cost_*' ! -name '*gpu*' \
           ! -path '*/CMakeFiles/*' | sort)

python3 scripts/bench_report.py "$results" docs/benchmarks.md
if command -v gnuplot >/dev/null && [[ -s $results/plot.dat ]]; then
  gnuplot -e "set terminal pngcairo size 900,420 font ',10'; set output 'docs/benchmarks.png';
    set title 'Scoped-timer cost as a ratio to a bare pair of clock reads (same run)';
    set style fill solid 0.8; set boxwidth 0.6; set yrange [0:*]; set grid ytics;
    set xtics rotate by -30 noenhanced; unset key;
    plot '$results/plot.dat' using 0:2:xtic(1) with boxes lc rgb '#3b6ea5'" ||
    gnuplot -e "set terminal png size 900,420; set output 'docs/benchmarks.png';
    set style fill solid 0.8; set boxwidth 0.6; set yrange [0:*]; unset key; set xtics rotate by -30 noenhanced;
    plot '$results/plot.dat' using 0:2:xtic(1) with boxes"
fi
echo "wrote docs/benchmarks.md$( [[ -f docs/benchmarks.png ]] && echo ' and docs/benchmarks.png')"
