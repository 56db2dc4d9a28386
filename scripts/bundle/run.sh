#!/usr/bin/env bash
# Runs the dflash GPU bundle (made by scripts/gpu-bundle.sh) on a GPU machine:
#
#   run.sh LOGDIR [ARCHIVE]
#
# Steps, each under `timeout`, the whole run within DFLASH_BUNDLE_BUDGET_S
# (default 270 s), of which the last DFLASH_BUNDLE_SANITIZER_BUDGET_S (default
# 100 s) are kept for step 5 whatever steps 1-4 take (a step that no longer
# fits is reported SKIP, which fails the run):
#   1. device line (nvidia-smi) and dflash_gpu_probe: runtime, driver, devices,
#      one checked kernel;
#   2. every GPU test (tests.tsv) in strict mode, DFLASH_REQUIRE_GPU=1: no
#      device is a failure, never a skip. A test that needs more devices than
#      this machine has (dflash_add_gpu_test MIN_DEVICES N, on a one-GPU
#      machine) is N/A: not applicable here, named, counted apart, not run
#      under the sanitizers, and neither a pass nor a failure;
#   3. the example, both binaries (and the first once more with --hs-link
#      rows: the device_queue_link path): --device cuda and --device cpu, 300 steps,
#      seed 7, --results files compared by compare_results.py --across-backends
#      (the cuda run's target forward is cuBLAS's: every integer field of every
#      step exactly, hidden-state sums and the loss curve within rel 1e-4, the
#      bitwise digests not at all); a "figures" line per binary: tokens/s of
#      both runs and target_forward.gpu's share of the wall time;
#   3b. the ops against PyTorch on the same machine (torch_reference.py, its
#      own time limit): dflash::ops::gpu (bin/dflash_ops_driver_gpu) against
#      torch on cuda, the host twins (bin/dflash_ops_driver) against torch on
#      the CPU; integers exactly, floats within the script's stated tolerances;
#      no torch importable: SKIP ("skipped: torch not importable");
#   4. every GPU benchmark: a "figures" line each (bandwidths as fractions of
#      the device-to-device copy measured in the same run, bench_fractions.py),
#      never a PASS; a benchmark that errors or exits non-zero is a FAIL;
#   5. compute-sanitizer, in parallel (DFLASH_BUNDLE_SANITIZER_JOBS, default
#      6): memcheck and initcheck on every applicable GPU test, racecheck and
#      synccheck on those whose kernels use shared memory (tests.tsv's fourth
#      column, from dflash_add_gpu_test SHARED_MEMORY). The [concurrent] cases
#      (two kernels resident at once, each spin bounded on the device) run
#      apart, under memcheck only; if the tool serialises them the bounded
#      spin runs out, and that is reported UNSUPPORTED with the kernel's words.
#      The [device_wide] cases (they read device-wide free memory, which the
#      other sanitizer jobs change) run in step 2 only. A tool is UNSUPPORTED on
#      this runtime when it fails on the clean probe; then its test runs are
#      not counted as failures (nor as passes).
# Environment: an inherited LD_LIBRARY_PATH is cleared (the binaries find
# their libraries through RUNPATH, lib/). cuBLAS is not carried (too large):
# the programs listed in cublas.txt (made by gpu-bundle.sh) load
# libcublas.so.13 / libcublasLt.so.13 from this machine, found at run time in
# the CUDA 13 wheel layout (site-packages/nvidia/cu13/lib, python3 'import
# nvidia.cu13'), else the older per-library layout (nvidia/cublas/lib), else
# any libcublas.so.13 under site-packages, else through ldconfig. A folder of
# symbolic links to those two files only (never the folder itself, which holds
# its own libcudart) goes on LD_LIBRARY_PATH, for those programs only. The
# summary's "cuBLAS:" line names the files used, or says none was found; then
# each of those programs is a FAIL saying so, without being run.
# LOGDIR/summary.txt: the device line, then one line per step,
#   PASS | FAIL | UNSUPPORTED | SKIP | N/A   step   figures or reason
# "figures" lines, a "skipped for time:" line naming every step the budget left
# out, and a last RESULT line. Every step's output is in LOGDIR too; at the end
# LOGDIR is packed into ARCHIVE (default LOGDIR.tar.gz: give a path under the
# device tool's $OUT, where only a few files come back) and the summary is
# printed again, last.
# Exit 0 only when every step passed (UNSUPPORTED and N/A allowed); no device: exit 1.
set -uo pipefail
[[ $# -eq 1 || $# -eq 2 ]] || { echo "usage: $0 LOGDIR [ARCHIVE]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1" || exit 2
logs=$(cd "$1" && pwd)
archive=${2:-$logs.tar.gz}
[[ $archive == /* ]] || archive=$PWD/$archive
summary=$logs/summary.txt
: >"$summary"
budget=${DFLASH_BUNDLE_BUDGET_S:-270}
sanitizer_budget=${DFLASH_BUNDLE_SANITIZER_BUDGET_S:-100}
sanitizer_jobs=${DFLASH_BUNDLE_SANITIZER_JOBS:-6}
((sanitizer_budget < budget)) || { echo "run.sh: DFLASH_BUNDLE_SANITIZER_BUDGET_S ($sanitizer_budget) must be below DFLASH_BUNDLE_BUDGET_S ($budget)" >&2; exit 2; }
t0=$SECONDS
# The binaries find their libraries through RUNPATH; an inherited search path
# would put another runtime before the one they were built with.
inherited_ld=${LD_LIBRARY_PATH:-}
unset LD_LIBRARY_PATH
scratch=$(mktemp -d)
# Every exit packs the logs and prints the summary last: a failed step's
# cause comes back with the archive, and the summary is the tail of the output.
pack_and_print() {
  rm -rf "$scratch"
  mkdir -p "$(dirname "$archive")" 2>/dev/null
  # (tar exits 1 when a file changed while it read it: a killed job's last
  # words; the archive is still whole.)
  tar -czf "$archive" --warning=no-file-changed -C "$(dirname "$logs")" "$(basename "$logs")" 2>"$scratch.tar-err"
  local rc=$?
  if ((rc <= 1)) && [[ -s $archive ]]; then
    echo "run.sh: logs packed into $archive"
  else
    echo "run.sh: could not pack $logs into $archive (tar exit $rc: $(head -c 300 "$scratch.tar-err"))" >&2
  fi
  rm -f "$scratch.tar-err"
  echo "==== summary ($summary) ===="
  cat "$summary"
}
trap pack_and_print EXIT
export DFLASH_REQUIRE_GPU=1
# CUDA 13 loads a kernel lazily, at its first launch, and loading can wait for
# the device to be idle: a kernel first launched while another kernel spins
# waiting for it would wait for the spinner. The tests that run such pairs
# (test_device_queue [concurrent]) load their kernels first; EAGER loads every
# kernel (CUB's too) at start-up, so no launch of theirs can load one. Only
# for them: eager loading costs every other program start-up time.
eager_tests=" test_device_queue "
cd "$here" || exit 2

n_pass=0 n_fail=0 n_unsup=0 n_skip=0 n_na=0
emit() { printf '%s\n' "$*" | tee -a "$summary"; }
result() {  # STATUS STEP FIGURES
  printf '%-11s %-46s %s\n' "$1" "$2" "$3" | tee -a "$summary"
  case $1 in
    PASS) n_pass=$((n_pass + 1)) ;;
    FAIL) n_fail=$((n_fail + 1)) ;;
    UNSUPPORTED) n_unsup=$((n_unsup + 1)) ;;
    N/A) n_na=$((n_na + 1)) ;;
    *) n_skip=$((n_skip + 1)) ;;
  esac
}
# Seconds a step may take: at most WANT, and what is left of the budget (0:
# nothing left, the step must be reported SKIP); steps 1-4 leave the sanitizer
# step its own share (in_sanitizers=1 lifts that). Call it right before the
# step starts, never before a wait: the time spent waiting is no longer left.
in_sanitizers=0
limit() {
  local end=$((budget - sanitizer_budget))
  ((in_sanitizers)) && end=$budget
  local left=$((end - (SECONDS - t0) - 5))
  ((left > $1)) && left=$1
  ((left < 10)) && left=0
  echo "$left"
}
skipped_for_time=()
skip_for_time() {  # STEP: reported SKIP, and named again in the closing lines
  result SKIP "$1" "time budget exhausted"
  skipped_for_time+=("$1")
}
first_line() {  # FILE REGEX -> first matching line, trimmed, or ""
  grep -m 1 -E "$2" "$1" 2>/dev/null | sed -e 's/^[= ]*//' -e 's/[[:space:]]*$//' | cut -c 1-160
}
timed_out() { [[ $1 == 124 || $1 == 137 ]]; }

# ---- 1. device ---------------------------------------------------------------
smi=$(command -v nvidia-smi || true)
for c in /usr/bin/nvidia-smi /usr/local/nvidia/bin/nvidia-smi; do
  [[ -z $smi && -x $c ]] && smi=$c
done
info=""
if [[ -n $smi ]]; then
  info=$(timeout 30 "$smi" --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1)
  smi_rc=$?
  info=$(printf '%s' "$info" | paste -sd ';' -)
  if ((smi_rc == 0)) && [[ -n $info ]]; then
    emit "device: $info (nvidia-smi: name, driver, memory)"
  else
    emit "device: no CUDA device (nvidia-smi exit $smi_rc: ${info:-no output})"
  fi
else
  emit "device: no CUDA device (nvidia-smi not found)"
fi
emit "bundle: $(sed -n '2,3p' MANIFEST 2>/dev/null | paste -sd '|' - | sed 's/|/; /g'); log: $logs; budget ${budget} s, ${sanitizer_budget} s of it for the sanitizers"
[[ -n $inherited_ld ]] && emit "environment: inherited LD_LIBRARY_PATH=$inherited_ld cleared (the binaries use their RUNPATH)"
# The bundle was linked against the build machine's glibc: say so plainly if
# this one is older (every program would fail to load).
need=$(sed -n 's/^needs glibc >= \([0-9.]*\).*/\1/p' MANIFEST 2>/dev/null)
have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
if [[ -n $need && -n $have ]] && [[ $(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n 1) != "$need" ]]; then
  result FAIL "glibc" "this machine has glibc $have; the bundle needs >= $need (rebuild it on an older distribution)"
fi

# ---- cuBLAS, for the programs linked with it ---------------------------------------
cublas_dir="" cublas_how="" cublas_file=""
# Where a wheel puts libcublas.so.13: CUDA 13 wheels share one folder,
# nvidia/cu13/lib; CUDA 12 wheels had one per library, nvidia/cublas/lib (a
# 13.x there is taken too). Only a folder that holds libcublas.so.13 counts.
find_cublas() {
  local py d f
  py=$(command -v python3 || true)
  if [[ -n $py ]]; then
    for m in nvidia.cu13 nvidia.cublas; do
      d=$("$py" -c "import os, $m as m; print(os.path.join(list(m.__path__)[0], 'lib'))" 2>/dev/null)
      if [[ -n $d && -f $d/libcublas.so.13 ]]; then
        cublas_dir=$d cublas_how="python package $m"
        return
      fi
    done
    local sp=()
    mapfile -t sp < <("$py" -c 'import site, sys; print("\n".join(site.getsitepackages() + [site.getusersitepackages()] + sys.path))' 2>/dev/null)
    for pattern in '*/nvidia/cu13/lib/libcublas.so.13' '*/nvidia/cublas/lib/libcublas.so.13' '*/libcublas.so.13'; do
      for d in "${sp[@]}"; do
        [[ -n $d && -d $d ]] || continue
        f=$(find "$d" -maxdepth 5 -path "$pattern" 2>/dev/null | sort | head -n 1)
        if [[ -n $f ]]; then
          cublas_dir=$(dirname "$f") cublas_how="found under $d"
          return
        fi
      done
    done
  fi
  if command -v ldconfig >/dev/null; then
    f=$(ldconfig -p 2>/dev/null | awk '$1 == "libcublas.so.13" { print $NF; exit }')
    [[ -n $f ]] && cublas_dir=$(dirname "$f") cublas_how="ldconfig"
  fi
}
cublas_users=()
[[ -f cublas.txt ]] && mapfile -t cublas_users <cublas.txt
needs_cublas() {  # EXE (bin/NAME)
  local e
  for e in "${cublas_users[@]}"; do [[ $e == "$1" ]] && return 0; done
  return 1
}
# `env` assignments for EXE: the folder of links to cuBLAS's two files, for its users only.
cublas_links=$scratch/cublas-lib
run_env() {
  if needs_cublas "$1" && [[ -n $cublas_dir ]]; then echo "LD_LIBRARY_PATH=$cublas_links"; fi
}
no_cublas="needs libcublas.so.13, not found on this machine (see the cuBLAS line): not run"
((${#cublas_users[@]} > 0)) && find_cublas
if ((${#cublas_users[@]} == 0)); then
  emit "cuBLAS: not needed (cublas.txt names no program)"
elif [[ -n $cublas_dir && ! -f $cublas_dir/libcublasLt.so.13 ]]; then
  emit "cuBLAS: $cublas_dir/libcublas.so.13 ($cublas_how) has no libcublasLt.so.13 beside it: not used"
  cublas_dir=""
elif [[ -n $cublas_dir ]]; then
  mkdir -p "$cublas_links"
  ln -s "$cublas_dir/libcublas.so.13" "$cublas_links/libcublas.so.13"
  ln -s "$cublas_dir/libcublasLt.so.13" "$cublas_links/libcublasLt.so.13"
  cublas_file=$(realpath "$cublas_dir/libcublas.so.13")
  emit "cuBLAS: $cublas_dir/libcublas.so.13 and libcublasLt.so.13 ($cublas_how; the file: $cublas_file), linked alone into the search path of ${#cublas_users[@]} programs: $(printf '%s ' "${cublas_users[@]}")"
else
  emit "cuBLAS: no libcublas.so.13 found (python3 'import nvidia.cu13' / 'import nvidia.cublas', nvidia/cu13/lib or nvidia/cublas/lib or any libcublas.so.13 under python's site-packages, ldconfig): the ${#cublas_users[@]} programs linked with it fail"
fi

have_gpu=0
timeout -k 5 60 bin/dflash_gpu_probe >"$logs/probe.log" 2>&1
rc=$?
if ((rc == 0)); then
  have_gpu=1
  result PASS "probe (dflash_gpu_probe)" "$(first_line "$logs/probe.log" '^device 0'); $(first_line "$logs/probe.log" '^cuda runtime'); $(first_line "$logs/probe.log" '^kernel ok')"
else
  why=$(first_line "$logs/probe.log" 'FAIL')
  result FAIL "probe (dflash_gpu_probe)" "${why:-exit $rc, see probe.log} (exit $rc)"
fi

# ---- 2. GPU tests, strict --------------------------------------------------------
mapfile -t test_lines <tests.tsv
n_tests=${#test_lines[@]}
((n_tests > 0)) || result FAIL "GPU tests" "tests.tsv lists no test: the bundle is broken"
catch_figures() {  # LOG -> Catch's summary line, or ""
  first_line "$1" '^(All tests passed|test cases:|No tests ran)'
}
# A row: name, program, sanitizer tools (space-separated, never empty), then
# the ctest arguments, shell-quoted and possibly empty (last: read collapses
# empty fields between tabs).
not_applicable=" "  # names of the tests that cannot apply to this machine
for row in "${test_lines[@]}"; do
  IFS=$'\t' read -r name exe tools_of args <<<"$row"
  eval "argv=($args)"
  l=$(limit 60)  # seconds on an H200; a hang costs one minute, not the run
  if ((l == 0)); then skip_for_time "test $name"; continue; fi
  if needs_cublas "$exe" && [[ -z $cublas_dir ]]; then result FAIL "test $name" "$no_cublas"; continue; fi
  s=$SECONDS
  loading=${CUDA_MODULE_LOADING:-LAZY}
  [[ $eager_tests == *" $name "* ]] && loading=EAGER
  mapfile -t env_of < <(run_env "$exe")
  env "${env_of[@]}" CUDA_MODULE_LOADING=$loading timeout -k 5 "$l" "$exe" "${argv[@]}" >"$logs/test-$name.log" 2>&1
  rc=$?
  d=$((SECONDS - s))
  figures=$(catch_figures "$logs/test-$name.log")
  if ((rc == 0)) && [[ $figures == "All tests passed"* ]]; then
    result PASS "test $name" "$figures, ${d} s"
  elif ((rc == 0)); then
    result FAIL "test $name" "exit 0 without Catch's 'All tests passed' (${figures:-no summary}), ${d} s"
  elif timed_out "$rc"; then
    result FAIL "test $name" "timed out after ${l} s"
  elif ((rc == 77)) && [[ $(first_line "$logs/test-$name.log" 'skipped: needs [0-9]+ CUDA devices, [0-9]+ visible') =~ needs\ ([0-9]+)\ CUDA\ devices,\ ([0-9]+)\ visible ]] &&
    ((BASH_REMATCH[2] >= 1 && BASH_REMATCH[2] < BASH_REMATCH[1])); then
    # The machine has a GPU but fewer than the test places work on: it says
    # nothing about this machine's code, good or bad.
    result N/A "test $name" "not applicable on ${BASH_REMATCH[2]} GPU(s): needs ${BASH_REMATCH[1]} (not run under the sanitizers either)"
    not_applicable+="$name "
  elif ((rc == 77)); then
    result FAIL "test $name" "exit 77 (skipped) although DFLASH_REQUIRE_GPU=1: $(first_line "$logs/test-$name.log" 'skipped')"
  else
    why=$(first_line "$logs/test-$name.log" 'FAIL: ' | sed 's/^.*FAIL: //')
    result FAIL "test $name" "exit $rc: ${why:-${figures:-see test-$name.log}}, ${d} s"
  fi
done

if ((have_gpu == 0)); then
  result SKIP "example cuda vs cpu" "no CUDA device"
  result SKIP "torch reference (gpu and host ops vs torch)" "no CUDA device"
  result SKIP "GPU benchmarks" "no CUDA device"
  result SKIP "compute-sanitizer" "no CUDA device"
  emit "total: $n_pass PASS, $n_fail FAIL, $n_unsup UNSUPPORTED, $n_skip SKIP, $n_na N/A in $((SECONDS - t0)) s"
  emit "RESULT: FAIL: no CUDA device: nothing ran on a GPU, nothing above passed on one"
  exit 1
fi

# ---- 3. the example: --device cuda against --device cpu ---------------------------
tokens_per_s() { local t; t=$(sed -n 's/^throughput: \([0-9.]*\) tokens\/s.*/\1/p' "$1" 2>/dev/null | head -n 1); echo "${t:-?}"; }
gpu_share() {  # LOG WHICH -> "; target_forward.gpu WHICH: TOTAL total = P % of wall" from the final profile, or ""
  awk -v which="$2" '$1 == "target_forward.gpu" { t = sprintf("; target_forward.gpu %s: %s %s total = %s %% of wall", which, $3, $4, $NF) }
    END { printf "%s", t }' "$1" 2>/dev/null
}
mapfile -t example_bins <examples.txt
# Every binary over the hs_device link; the first also over the hs_rows ring (--hs-link rows) and
# with its target forward replayed from CUDA graphs (--cuda-graphs: the cpu run replays the twin's).
example_runs=()
for exe in "${example_bins[@]}"; do example_runs+=("$exe|"); done
((${#example_bins[@]})) && example_runs+=("${example_bins[0]}|--hs-link rows" "${example_bins[0]}|--cuda-graphs")
for run in "${example_runs[@]}"; do
  exe=${run%%|*} extra=${run#*|}
  name=$(basename "$exe")
  step="example $name cuda==cpu"
  if [[ -n $extra ]]; then
    step="example $name ${extra} cuda==cpu"
    name="$name-${extra##* }"
  fi
  if needs_cublas "$exe" && [[ -z $cublas_dir ]]; then result FAIL "$step" "$no_cublas"; continue; fi
  l=$(limit 150)
  if ((l == 0)); then skip_for_time "$step"; continue; fi
  mapfile -t env_of < <(run_env "$exe")
  # One target worker: the drafter then sees the steps in the same order on
  # both backends, so even the loss curve must agree.
  common=(--steps 300 --seed 7 --target-workers 1 --quiet --profile-interval 0)
  # shellcheck disable=SC2206  # the extra flags are words
  [[ -n $extra ]] && common+=($extra)
  s=$SECONDS
  for dev in cuda cpu; do
    rm -f "$logs/$name.$dev.txt"
    (
      env "${env_of[@]}" timeout -k 5 "$l" "$exe" --device "$dev" "${common[@]}" --results "$logs/$name.$dev.txt" \
        >"$logs/example-$name-$dev.log" 2>&1
      echo $? >"$logs/.rc-$name-$dev"
    ) &
  done
  wait
  d=$((SECONDS - s))
  rc_cuda=$(cat "$logs/.rc-$name-cuda") rc_cpu=$(cat "$logs/.rc-$name-cpu")
  rm -f "$logs/.rc-$name-cuda" "$logs/.rc-$name-cpu"
  if ((rc_cuda == 2 || rc_cpu == 2)) && grep -q -e '--results' "$logs/example-$name-cuda.log" "$logs/example-$name-cpu.log"; then
    result FAIL "$step" "the binary rejects --results (exit 2): $(first_line "$logs/example-$name-cuda.log" 'error')"
  elif timed_out "$rc_cuda" || timed_out "$rc_cpu"; then
    result FAIL "$step" "timed out after ${l} s (cuda exit $rc_cuda, cpu exit $rc_cpu)"
  elif ((rc_cuda == 3)); then
    result FAIL "$step" "--device cuda unavailable (exit 3): $(first_line "$logs/example-$name-cuda.log" 'error')"
  elif ((rc_cuda != 0 || rc_cpu != 0)); then
    result FAIL "$step" "cuda exit $rc_cuda, cpu exit $rc_cpu: $(first_line "$logs/example-$name-cuda.log" 'error|FAIL')"
  else
    python3 compare_results.py --across-backends "$logs/$name.cpu.txt" "$logs/$name.cuda.txt" >"$logs/compare-$name.log" 2>&1
    rc=$?
    # The two runs ran at the same time (16 cores: the drafter, on the CPU, bounds both).
    emit "figures     example $name: tokens/s cuda $(tokens_per_s "$logs/example-$name-cuda.log"), cpu $(tokens_per_s "$logs/example-$name-cpu.log") (both runs at once)$(gpu_share "$logs/example-$name-cuda.log" cuda)$(gpu_share "$logs/example-$name-cpu.log" cpu)"
    verdict=$(tail -n 1 "$logs/compare-$name.log")
    if ((rc == 0)); then
      result PASS "$step" "300 steps, seed 7: $verdict, ${d} s"
    else
      result FAIL "$step" "$(first_line "$logs/compare-$name.log" '^(MISMATCH|MALFORMED)') [$verdict]"
    fi
  fi
done

# ---- 3b. the ops against PyTorch, from the same inputs -------------------------------
for pair in "dflash_ops_driver_gpu cuda" "dflash_ops_driver cpu"; do
  read -r drv dev <<<"$pair"
  step="torch reference: $drv vs torch $dev"
  if [[ ! -x bin/$drv || ! -f torch_reference.py ]]; then
    result FAIL "$step" "bin/$drv or torch_reference.py missing: the bundle is broken"
    continue
  fi
  if ! command -v python3 >/dev/null; then result SKIP "$step" "python3 not found"; continue; fi
  l=$(limit 90)
  if ((l == 0)); then skip_for_time "$step"; continue; fi
  s=$SECONDS
  timeout -k 5 "$l" python3 torch_reference.py --driver "bin/$drv" --device "$dev" --timeout "$l" \
    >"$logs/torch-$drv.log" 2>&1
  rc=$?
  d=$((SECONDS - s))
  verdict=$(first_line "$logs/torch-$drv.log" '^RESULT: ' | sed 's/^RESULT: [A-Z]*: //')
  if ((rc == 0)) && grep -q '^RESULT: PASS' "$logs/torch-$drv.log"; then
    result PASS "$step" "$verdict, ${d} s"
  elif ((rc == 77)); then
    result SKIP "$step" "$(first_line "$logs/torch-$drv.log" '^skipped')"
  elif timed_out "$rc"; then
    result FAIL "$step" "timed out after ${l} s"
  else
    why=$(first_line "$logs/torch-$drv.log" '^(MISMATCH|FAIL)')
    result FAIL "$step" "exit $rc: ${why:-see torch-$drv.log}${verdict:+ [$verdict]}"
  fi
done

# The guide's gpu_pipeline: the same pipeline on the host twin, then on cuda_backend (strict: no device fails).
l=$(limit 60)
if ((l == 0)); then
  skip_for_time "example gpu_pipeline"
elif timeout -k 5 "$l" bin/gpu_pipeline >"$logs/example-gpu_pipeline.log" 2>&1; then
  result PASS "example gpu_pipeline" "$(first_line "$logs/example-gpu_pipeline.log" '^cuda: total')"
else
  result FAIL "example gpu_pipeline" "exit $?: $(first_line "$logs/example-gpu_pipeline.log" '^cuda|total|error')"
fi

# ---- 4. GPU benchmarks: figures, as fractions of the D2D copy -------------------------
# A benchmark has no threshold to pass: what it measured is reported, and only
# a benchmark that errors (or a missing D2D reference) fails the run.
mapfile -t bench_bins <benchmarks.txt
jsons=()
for exe in "${bench_bins[@]}"; do
  name=$(basename "$exe")
  l=$(limit 120)
  if ((l == 0)); then skip_for_time "bench $name"; continue; fi
  json=$logs/bench-$name.json
  s=$SECONDS
  timeout -k 5 "$l" "$exe" --benchmark_min_time=0.1 --benchmark_out="$json" --benchmark_out_format=json \
    >"$logs/bench-$name.log" 2>&1
  rc=$?
  if ((rc == 0)); then
    jsons+=("$json")
  elif timed_out "$rc"; then
    result FAIL "bench $name" "timed out after ${l} s"
  else
    result FAIL "bench $name" "exit $rc: $(first_line "$logs/bench-$name.log" 'FAIL|error|Error|not found')"
  fi
done
if ((${#jsons[@]} > 0)); then
  python3 bench_fractions.py "${jsons[@]}" >"$logs/bench-fractions.txt" 2>&1
  rc=$?
  while IFS=$'\t' read -r status bench figures; do
    if [[ $status == FIGURES ]]; then
      emit "$(printf '%-11s %-46s %s' figures "bench $bench" "$figures")"
    else
      result "$status" "bench $bench" "$figures"
    fi
  done <"$logs/bench-fractions.txt"
  ((rc == 0)) || grep -q '^FAIL' "$logs/bench-fractions.txt" || result FAIL "bench fractions" "bench_fractions.py exit $rc"
fi

# ---- 5. compute-sanitizer, within its own share of the budget ---------------------------
in_sanitizers=1
cs=$(command -v compute-sanitizer || true)
if [[ -z $cs ]]; then
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda-*/bin/compute-sanitizer; do
    [[ -x $c ]] && { cs=$c; break; }
  done
fi
tools=(memcheck racecheck synccheck initcheck)
# Every tool also reports each CUDA API call that returns an error (the
# default, --report-api-errors explicit), and counts it for --error-exitcode.
# dflash gets such results on purpose: a busy cudaEventQuery / cudaStreamQuery
# answers cudaErrorNotReady (an answer, not a failure), and tests provoke bad
# launches and allocations to check they are reported. So every tool runs with
# --report-api-errors no: a clean run is not a false failure. A real API error
# still fails the run: every dflash call checks its result and throws, so the
# test fails (exit non-zero, reported below).
tool_flags() { echo --report-api-errors no; }
# The kernel a report names, when it is a library's (cuBLAS, CUTLASS, CUB):
# said beside the failure, so a report inside a library is not read as dflash's.
library_kernel() {  # LOG -> "; inside a library kernel: NAME" or ""
  local k
  k=$(grep -m 1 -oE '(in|of) +kernel +[^ ]+|^========= +at +[^ (]+' "$1" 2>/dev/null | awk '{ print $NF }')
  [[ $k =~ (cublas|cutlass|xmma|gemm|cub::|CUB_) ]] && echo "; inside a library kernel: $(echo "$k" | cut -c 1-80)"
}
if [[ -z $cs ]]; then
  result SKIP "compute-sanitizer" "compute-sanitizer not in PATH nor /usr/local/cuda*/bin"
else
  # Background jobs, at most $sanitizer_jobs at once; each writes "rc seconds limit".
  # The limit is taken once a slot is free (a queued job's wait is spent
  # budget); when nothing is left the step is skipped and launch returns 1.
  launch() {  # ID WANT STEP CMD...
    local id=$1 want=$2 step=$3 lim
    shift 3
    while (($(jobs -rp | wc -l) >= sanitizer_jobs)); do wait -n; done
    lim=$(limit "$want")
    if ((lim == 0)); then skip_for_time "$step"; return 1; fi
    (
      s=$SECONDS
      timeout -k 5 "$lim" "$@" >"$logs/$id.log" 2>&1
      echo "$? $((SECONDS - s)) $lim" >"$logs/.rc-$id"
    ) &
  }
  read_rc() { cat "$logs/.rc-$1" 2>/dev/null || echo "999 0 0"; rm -f "$logs/.rc-$1"; }
  # Control: each tool on the clean probe. Failing there = unsupported here.
  declare -A supported=() probed=()
  for tool in "${tools[@]}"; do
    launch "sanitizer-$tool-probe" 60 "$tool (its GPU tests)" \
      "$cs" --tool "$tool" $(tool_flags "$tool") --error-exitcode 99 bin/dflash_gpu_probe && probed[$tool]=1
  done
  wait
  for tool in "${tools[@]}"; do
    [[ -n ${probed[$tool]:-} ]] || continue
    read -r rc d lim < <(read_rc "sanitizer-$tool-probe")
    if ((rc == 0)); then
      supported[$tool]=1
    elif timed_out "$rc"; then
      result FAIL "$tool (its GPU tests)" "the clean probe timed out under $tool after ${lim} s"
    elif ((rc == 99)); then  # the tool works, and found an error in the probe itself
      result FAIL "$tool (its GPU tests)" "$tool reports errors in dflash_gpu_probe: $(first_line "$logs/sanitizer-$tool-probe.log" 'ERROR SUMMARY')"
    else
      why=$(first_line "$logs/sanitizer-$tool-probe.log" 'Error|error|not supported|unsupported|FAIL')
      result UNSUPPORTED "$tool (its GPU tests)" "on this runtime: the clean probe fails under it (exit $rc): ${why:-see sanitizer-$tool-probe.log}"
    fi
  done
  # The matrix: each test under the tools its row names (memcheck and
  # initcheck always; racecheck and synccheck where kernels use shared memory),
  # without its [concurrent] and [device_wide] cases; then, under memcheck
  # alone, the [concurrent] cases of the programs that have any. A test with
  # its own Catch filter from ctest keeps it unchanged.
  ids=()
  for row in "${test_lines[@]}"; do
    IFS=$'\t' read -r name exe tools_of args <<<"$row"
    [[ $not_applicable == *" $name "* ]] && continue
    eval "argv=($args)"
    ((${#argv[@]})) || argv=("~[concurrent]~[device_wide]")
    runnable=1
    needs_cublas "$exe" && [[ -z $cublas_dir ]] && runnable=0
    mapfile -t env_of < <(run_env "$exe")
    for tool in $tools_of; do
      [[ -n ${supported[$tool]:-} ]] || continue
      if ((!runnable)); then result FAIL "$tool $name" "$no_cublas"; continue; fi
      id=sanitizer-$tool-$name
      launch "$id" 150 "$tool $name" env "${env_of[@]}" "$cs" --tool "$tool" $(tool_flags "$tool") --error-exitcode 99 --print-limit 20 "$exe" "${argv[@]}" &&
        ids+=("$tool $name $id plain")
    done
    # Catch lists the [concurrent] case names, one a line (nothing else on success).
    if ((runnable)) && [[ -n ${supported[memcheck]:-} ]] && [[ -z $args ]] &&
      [[ -n $(env "${env_of[@]}" timeout -k 5 30 "$exe" --list-test-names-only "[concurrent]" 2>/dev/null | grep -v '^ *$') ]]; then
      id=sanitizer-memcheck-$name-concurrent
      launch "$id" 90 "memcheck $name [concurrent]" env "${env_of[@]}" CUDA_MODULE_LOADING=EAGER "$cs" --tool memcheck $(tool_flags memcheck) --error-exitcode 99 --print-limit 20 "$exe" "[concurrent]" &&
        ids+=("memcheck $name $id concurrent")
    fi
  done
  wait
  for entry in "${ids[@]}"; do
    read -r tool name id kind <<<"$entry"
    read -r rc d lim < <(read_rc "$id")
    step="$tool $name"
    [[ $kind == concurrent ]] && step+=" [concurrent]"
    errors=$(first_line "$logs/$id.log" 'ERROR SUMMARY')
    if ((rc == 0)); then
      result PASS "$step" "${errors:-no error summary}, ${d} s"
    elif ((rc == 99)); then
      result FAIL "$step" "${errors}: $(grep -m 1 -E '^========= +(Invalid|Race|Barrier|Uninitialized|Error|Program hit|Warp|Potential)' "$logs/$id.log" | sed 's/^=* *//' | cut -c 1-120)$(library_kernel "$logs/$id.log")"
    elif timed_out "$rc"; then
      result FAIL "$step" "timed out after ${lim} s"
    elif [[ $kind == concurrent ]] && grep -q '^TIMED OUT: ' "$logs/$id.log" && [[ -z $(grep -E '^========= +(Invalid|Race|Uninitialized|Program hit)' "$logs/$id.log") ]]; then
      # The pair's spins are bounded on the device: a tool that runs one
      # kernel at a time makes the waiting one give up, and it says so.
      result UNSUPPORTED "$step" "$tool ran the pair one kernel at a time: $(first_line "$logs/$id.log" '^TIMED OUT: ' | cut -c 1-100)"
    else
      result FAIL "$step" "exit $rc (the test failed under $tool): $(first_line "$logs/$id.log" 'FAILED|FAIL:|Error') ${errors}"
    fi
  done
fi

total=$((SECONDS - t0))
((total > 300)) && result FAIL "whole run within 5 minutes" "took ${total} s"
if ((${#skipped_for_time[@]} > 0)); then
  emit "skipped for time: $(printf '%s, ' "${skipped_for_time[@]}" | sed 's/, $//')"
fi
[[ $not_applicable != " " ]] && emit "not applicable on this machine:$not_applicable"
emit "total: $n_pass PASS, $n_fail FAIL, $n_unsup UNSUPPORTED, $n_skip SKIP, $n_na N/A in ${total} s"
if ((n_fail > 0 || n_skip > 0 || n_pass == 0)); then
  emit "RESULT: FAIL"
  exit 1
fi
extra=()
((n_unsup > 0)) && extra+=("$n_unsup UNSUPPORTED on this runtime")
((n_na > 0)) && extra+=("$n_na N/A on this machine")
if ((${#extra[@]})); then emit "RESULT: PASS ($(printf '%s, ' "${extra[@]}" | sed 's/, $//'): see above)"; else emit "RESULT: PASS"; fi
exit 0
