#!/usr/bin/env bash
# Builds and runs everything that needs a CUDA device, on a machine that has
# one (made for one H200/H100, sm_90), and writes logs and a summary to OUTDIR:
#   configure/build logs, GPU tests (ctest -L gpu), the host suite, every GPU
#   benchmark (JSON + console), the example's GPU path for a few hundred steps,
#   compute-sanitizer memcheck of each GPU test. Budget: under 5 minutes.
#   Every step has a timeout (ctest's, or `timeout`): a hung kernel fails its
#   step (FAIL:124) instead of stalling the whole run.
#
# usage: scripts/gpu-check.sh OUTDIR [CUDA_ARCH=90]
set -uo pipefail
out=${1:?usage: scripts/gpu-check.sh OUTDIR [CUDA_ARCH]}
arch=${2:-90}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
export PATH=/usr/local/cuda/bin:$PATH
jobs=$(nproc)
build=build/gpu-check
summary=$out/summary.txt
: >"$summary"
start=$SECONDS
note() { echo "$*" | tee -a "$summary"; }
step() {  # step NAME LOGFILE CMD... : run, log, record pass/fail and seconds
  local name=$1 log=$2 t0=$SECONDS rc
  shift 2
  "$@" >"$out/$log" 2>&1
  rc=$?
  note "$(printf '%-34s %-6s %4d s  (%s)' "$name" "$([[ $rc == 0 ]] && echo ok || echo FAIL:$rc)" $((SECONDS - t0)) "$log")"
  return $rc
}

note "dflash gpu-check $(git rev-parse --short HEAD 2>/dev/null) on $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv >"$out/nvidia-smi.csv" 2>&1 &&
  note "device: $(tail -n +2 "$out/nvidia-smi.csv")" ||
  note "device: NONE (nvidia-smi failed) — GPU tests and benchmarks below report skipped; this run says nothing about the GPU"

step configure configure.log cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDFLASH_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" || { note "configure failed"; exit 1; }
step build build.log cmake --build "$build" --parallel "$jobs" || { note "build failed"; exit 1; }

step "gpu tests (ctest -L gpu)" gpu-tests.log ctest --test-dir "$build" -L gpu --output-on-failure --timeout 120
grep -E "tests passed|Skipped|Failed" "$out/gpu-tests.log" | sed 's/^/    /' >>"$summary"
step "host tests (ctest -LE gpu)" host-tests.log ctest --test-dir "$build" -LE gpu --output-on-failure -j "$jobs" --timeout 300
grep -E "tests passed" "$out/host-tests.log" | sed 's/^/    /' >>"$summary"

# Every GPU benchmark: executables built by dflash_add_gpu_benchmark are named *_gpu*.
while IFS= read -r exe; do
  name=$(basename "$exe")
  step "benchmark $name" "bench-$name.txt" timeout 120 "$exe" --benchmark_min_time=0.2 \
    --benchmark_out="$out/bench-$name.json" --benchmark_out_format=json
done < <(find "$build/benchmarks" -type f -executable -name '*gpu*' | sort)

example=$build/examples/dflash_train_pipeline/dflash_train_pipeline_profiled
if [[ -x $example ]]; then
  step "example, GPU path, 300 steps" example-gpu.log timeout 120 "$example" --device cuda --steps 300 --profile-interval 5
  tail -n 30 "$out/example-gpu.log" | sed 's/^/    /' >>"$summary"
else
  note "example not built: $example"
fi

if command -v compute-sanitizer >/dev/null; then
  while IFS= read -r t; do
    exe=$(find "$build/tests" -type f -executable -name "$t" | head -n 1)
    [[ -n $exe ]] && step "memcheck $t" "memcheck-$t.log" timeout 120 compute-sanitizer --tool memcheck --error-exitcode 1 "$exe"
  done < <(ctest --test-dir "$build" -L gpu -N | awk '/Test +#/ {print $3}')
else
  note "compute-sanitizer not found: memcheck skipped"
fi
note "total $((SECONDS - start)) s"
grep -q FAIL "$summary" && exit 1 || exit 0
