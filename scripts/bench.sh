#!/usr/bin/env bash
# Runs every benchmark binary of a build, and scripts/compile_time.py, and writes
# docs/benchmarks.md (tables, ratios) and docs/benchmarks.png (gnuplot). Benchmarks are not tests.
#
# usage: scripts/bench.sh [BUILD_DIR=build/release] [MIN_TIME=0.3]
#        scripts/bench.sh --report-only [BUILD_DIR]   (tables and plot again from the last run's results)
set -euo pipefail
cd "$(dirname "$0")/.."
report_only=0
if [[ ${1:-} == --report-only ]]; then
  report_only=1
  shift
fi
build=${1:-build/release}
min_time=${2:-0.3}
results=$build/bench-results
if ((report_only)); then
  [[ -d $results ]] || { echo "bench.sh: no results in $results: run scripts/bench.sh first" >&2; exit 2; }
else
rm -rf "$results" && mkdir -p "$results"
cmake --build "$build"

# Benchmark binaries: everything under benchmarks/ except the zero-cost variants
# (callgrind subjects, see scripts/zero_cost_check.sh) and analysis/ (a model of a
# pipeline that takes its own arguments, not a benchmark).
while IFS= read -r exe; do
  name=$(basename "$exe")
  echo "== $name"
  "$exe" --benchmark_min_time="$min_time" --benchmark_out="$results/$name.json" \
    --benchmark_out_format=json | tee "$results/$name.txt"
done < <(find "$build/benchmarks" -type f -executable ! -name 'zero_cost_*' ! -name '*gpu*' \
           ! -name 'bench_mpi_link' ! -path '*/CMakeFiles/*' ! -path '*/analysis/*' | sort)

# The MPI link needs two ranks (OpenMPI: root and more ranks than cores need the flags).
mpi_bench=$build/benchmarks/mpi/bench_mpi_link
if [[ -x $mpi_bench ]] && command -v mpirun >/dev/null; then
  echo "== bench_mpi_link (mpirun -np 2)"
  mpirun --oversubscribe --allow-run-as-root -np 2 "$mpi_bench" 9 --benchmark_out="$results/bench_mpi_link.json" \
    | tee "$results/bench_mpi_link.txt"
fi

# Compile time: a dflash pipeline TU and examples/quickstart.cpp next to the same pipeline in
# oneTBB, g++ -O2, interleaved rounds (CPU seconds of the compiler; no ccache).
echo "== compile_time"
python3 scripts/compile_time.py --out "$results/compile_time.json" | tee "$results/compile_time.txt"

fi

python3 scripts/bench_report.py "$results" docs/benchmarks.md
if command -v gnuplot >/dev/null && [[ -s $results/plot.dat ]]; then
  scripts/bench_plot.sh "$results" docs/benchmarks.png
fi
echo "wrote docs/benchmarks.md$( [[ -f docs/benchmarks.png ]] && echo ' and docs/benchmarks.png')"
