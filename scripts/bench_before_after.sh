#!/usr/bin/env bash
# Runs the same benchmarks from two builds alternately in one sitting (before, after, before,
# after), so a change's effect is read against the machine's noise of the same minutes:
#   scripts/bench_before_after.sh OLD_BUILD_DIR NEW_BUILD_DIR [ROUNDS] [OUT_DIR]
# e.g. git worktree add ../before <rev>; build its benchmarks in ../before/build/release; then
#   scripts/bench_before_after.sh ../before/build/release build/release 2 /tmp/ab
set -euo pipefail
old=${1:?old build dir}/benchmarks
new=${2:?new build dir}/benchmarks
rounds=${3:-2}
out=${4:-/tmp/bench_before_after}
mkdir -p "$out"
for round in $(seq 1 "$rounds"); do
  for v in old new; do
    b=${!v}
    echo "=== round $round $v $(date +%T) load $(cut -d' ' -f1 /proc/loadavg)"
    "$b/pipeline/pipeline_vs_tbb" > "$out/pvt.$v.$round.txt" 2>&1
    "$b/queue/compare_queue" > "$out/cq.$v.$round.txt" 2>&1
    "$b/compare_profiler" > "$out/cp.$v.$round.txt" 2>&1
    mpirun --oversubscribe --allow-run-as-root -np 2 "$b/mpi/bench_mpi_link" 9 > "$out/mpi.$v.$round.txt" 2>&1
  done
done
echo "=== done $(date +%T); results in $out"
