#!/usr/bin/env bash
# Runs the GPU bundle's run.sh (scripts/bundle) on a fake bundle whose
# programs, nvidia-smi and compute-sanitizer are shell stubs, and checks its
# summary line by line. No GPU and no CUDA build needed: this is run.sh's own
# logic (statuses, figures, exit code), not the GPU code.
#   fake_bundle_test.sh SOURCE_DIR pass|mixed|nodevice|budget|nocublas|cuda12|onegpu
# budget: compute-sanitizer hangs on every test (not on the probe), two jobs at
# a time, a 25 s budget: the run must end within the budget plus a few seconds
# and name every step it skipped for time.
# cuBLAS (pass, nocublas): bin/ex_plain and bin/test_a are listed in
# cublas.txt and fail as the loader would unless LD_LIBRARY_PATH holds cuBLAS's
# folder; "pass" has the CUDA 13 wheel layout (site-packages/nvidia/cu13/lib,
# no python package of its own), "cuda12" only the CUDA 12 layout with a
# libcublas.so.12 (not usable), "nocublas" none (python3 and ldconfig are
# stand-ins, so the machine's own cuBLAS stays out).
# onegpu: a third test needs two devices (MIN_DEVICES 2) on a one-GPU
# machine: it is N/A, never run under a sanitizer, and the run still passes.
set -uo pipefail
src=$1 scenario=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
b=$work/bundle fake=$work/fakebin
mkdir -p "$b/bin" "$fake"
cp "$src/scripts/bundle/run.sh" "$src/scripts/bundle/compare_results.py" "$src/scripts/bundle/bench_fractions.py" "$b/"
glibc=2.17
[[ $scenario == mixed ]] && glibc=99.0  # newer than any: run.sh must say so
printf 'dflash GPU bundle\ncommit fake\nbuilt now on here for sm_90\nnvcc 13.0\nneeds glibc >= %s and a CUDA 13 driver\n' "$glibc" >"$b/MANIFEST"
printf 'test_a\tbin/test_a\tmemcheck initcheck racecheck synccheck\t\ntest_b\tbin/test_b\tmemcheck initcheck racecheck synccheck\t'\''[x]'\'' --order decl\n' >"$b/tests.tsv"
[[ $scenario == onegpu ]] && printf 'test_c\tbin/test_c\tmemcheck initcheck\t\n' >>"$b/tests.tsv"
printf 'bin/bench_x\n' >"$b/benchmarks.txt"
printf 'bin/ex_plain\nbin/ex_prof\n' >"$b/examples.txt"
stub() { printf '#!/usr/bin/env bash\n%s\n' "$2" >"$1"; chmod +x "$1"; }
real_py=$(PATH=/usr/bin:/bin command -v python3)
stub "$fake/ldconfig" 'exit 0'
if [[ $scenario == pass || $scenario == nocublas || $scenario == cuda12 ]]; then
  printf 'bin/ex_plain\nbin/test_a\n' >"$b/cublas.txt"
fi
# The wheels' folders: site-packages/nvidia/<...>/lib, with a libcudart of
# their own beside cuBLAS (which must stay off the programs' search path).
site=$work/py/site-packages
if [[ $scenario == nocublas ]]; then
  stub "$fake/python3" "case \"\$*\" in *nvidia.cu*|*getsitepackages*) exit 1;; esac; exec $real_py \"\$@\""
else
  if [[ $scenario == cuda12 ]]; then
    mkdir -p "$site/nvidia/cublas/lib"
    : >"$site/nvidia/cublas/__init__.py"
    : >"$site/nvidia/cublas/lib/libcublas.so.12"
    : >"$site/nvidia/cublas/lib/libcublasLt.so.12"
  else
    mkdir -p "$site/nvidia/cu13/lib"
    : >"$site/nvidia/cu13/lib/libcublas.so.13.1.0.3"
    ln -s libcublas.so.13.1.0.3 "$site/nvidia/cu13/lib/libcublas.so.13"
    : >"$site/nvidia/cu13/lib/libcublasLt.so.13"
    : >"$site/nvidia/cu13/lib/libcudart.so.13"
  fi
  # site.getsitepackages() of the stand-in names the fake folder only.
  stub "$fake/python3" "case \"\$*\" in *getsitepackages*) echo $site; exit 0;; esac; PYTHONPATH=$site exec $real_py \"\$@\""
fi
# A cuBLAS user: fails to load, as the real one would, unless LD_LIBRARY_PATH
# leads to libcublas.so.13, and fails as a wrong runtime would if it leads to
# a wheel's libcudart (or anything inherited).
needs_cublas=''
[[ -f $b/cublas.txt ]] &&
  needs_cublas='found=0; IFS=: read -ra dirs <<<"${LD_LIBRARY_PATH:-}"; for d in "${dirs[@]}"; do
  [[ -e $d/libcudart.so.13 || $d == */inherited* ]] && { echo "$0: loaded another libcudart from $d"; exit 126; }
  [[ -e $d/libcublas.so.13 && -e $d/libcublasLt.so.13 ]] && found=1; done
((found)) || { echo "$0: error while loading shared libraries: libcublas.so.13"; exit 127; }' 
# The torch step: driver stubs and a torch_reference.py stand-in (its own checks are
# tests/torch_reference's); "mixed": a mismatch on cuda, no torch for the CPU run.
stub "$b/bin/dflash_ops_driver_gpu" 'exit 0'
stub "$b/bin/dflash_ops_driver" 'exit 0'
cat >"$b/torch_reference.py" <<PY
import sys
dev = sys.argv[sys.argv.index("--device") + 1]
if "$scenario" == "mixed" and dev == "cuda":
    print("MISMATCH c7 kv_indices: [3] driver 2 vs reference 1")
    print("RESULT: FAIL: 1 mismatches; 107 cases; seed 5")
    sys.exit(1)
if "$scenario" == "mixed":
    print("skipped: torch not importable (No module named torch)")
    sys.exit(77)
print("reference: torch 2.5.1 on " + dev)
print("RESULT: PASS: 107 cases (90 random), torch reference on %s, 3.1 s; seed 5" % dev)
PY

if [[ $scenario == nodevice ]]; then
  # A stub, not "absent": a real nvidia-smi in /usr/bin must not change the outcome.
  stub "$fake/nvidia-smi" 'echo "NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver."; exit 9'
  stub "$b/bin/dflash_gpu_probe" 'echo "FAIL: no CUDA device (fake)"; exit 1'
  stub "$b/bin/test_a" 'echo "test_a: FAIL: no CUDA device (fake) and DFLASH_REQUIRE_GPU is set"; exit 1'
  stub "$b/bin/test_b" 'echo "test_b: FAIL: no CUDA device (fake) and DFLASH_REQUIRE_GPU is set"; exit 1'
else
  stub "$fake/nvidia-smi" 'echo "NVIDIA H200, 580.65.06, 143771 MiB"'
  stub "$b/bin/dflash_gpu_probe" 'echo "cuda runtime 13000, driver supports 13000"; echo "device 0: NVIDIA H200, sm_90, 132 SMs, 139.8 GiB"; echo "kernel ok: 64 blocks x 256 threads"'
  # test_a has a [concurrent] case; in "mixed" the sanitizer runs it one kernel
  # at a time, so its bounded spin gives up and says so.
  stub "$b/bin/test_a" "$needs_cublas"'
[[ $DFLASH_REQUIRE_GPU == 1 ]] || exit 5
[[ $1 == --list-test-names-only ]] && { [[ $2 == "[concurrent]" ]] && echo "producer and consumer kernels run concurrently"; exit 1; }
if [[ $1 == "[concurrent]" ]]; then
  [[ ${CUDA_MODULE_LOADING:-} == EAGER ]] || { echo "lazy loading"; exit 6; }
  if [[ '"$scenario"' == mixed ]]; then echo "TIMED OUT: producers (ring full for the whole spin budget: is the consumer running concurrently?)"; exit 1; fi
  echo "All tests passed (40 assertions in 2 test cases)"; exit 0
fi
[[ ${SANITIZED:-} != 1 || $1 == "~[concurrent]~[device_wide]" ]] || { echo "sanitized without the filter: $*"; exit 7; }
echo "All tests passed (12 assertions in 3 test cases)"'
  # test_b must get its ctest arguments through tests.tsv intact.
  stub "$b/bin/test_b" '[[ $# == 3 && $1 == "[x]" && $2 == --order && $3 == decl ]] || { echo "bad args: $*"; exit 4; }
echo "All tests passed (7 assertions in 1 test case)"'
  # A MIN_DEVICES 2 test on a one-GPU machine; the sanitizers must not run it.
  stub "$b/bin/test_c" '[[ ${SANITIZED:-} == 1 ]] && { echo "test_c ran under a sanitizer"; exit 5; }
echo "test_c: skipped: needs 2 CUDA devices, 1 visible (placement over devices has nothing to place)"; exit 77'
  # Google Benchmark stand-in: the D2D reference, one bandwidth, one latency.
  stub "$b/bin/bench_x" 'for a; do case $a in --benchmark_out=*) out=${a#*=};; esac; done
cat >"$out" <<JSON
{"benchmarks": [
 {"name": "BM_d2d_peak/manual_time", "real_time": 600.0, "time_unit": "us", "bytes_per_second": 4.0e12},
 {"name": "BM_pack<float>/4096/manual_time", "real_time": 100.0, "time_unit": "us", "bytes_per_second": 3.0e12},
 {"name": "BM_readback_batched", "real_time": 9.5, "time_unit": "us"}]}
JSON'
  # The two backends' digests differ (another forward), their layouts do not.
  results='for a; do case $prev in --results) out=$a;; --device) dev=$a;; esac; prev=$a; done
printf "steps 300\nchecksum 0xabc\nloss_f 2.5\nstep0_layout 0123456789abcdef\nstep0_digest %s\n" "$([[ $dev == cuda ]] && echo c0da || echo c0c0)" >"$out"
echo "throughput: 1234 tokens/s (300 steps trained)"
echo "target_forward.gpu            300  195.324 ms    6.511 ms    4.456 ms   13.107 ms   23.393 ms   23.393 ms    15.4"'
  stub "$b/bin/ex_plain" "$needs_cublas
$results"
  if [[ $scenario == mixed ]]; then
    stub "$b/bin/ex_prof" 'echo "ex_prof: error: The following argument was not expected: --results" >&2; exit 2'
  else
    stub "$b/bin/ex_prof" "$results"
  fi
  stub "$b/bin/gpu_pipeline" 'echo "host twin: total 5068800 (expected 5068800)"; echo "cuda: total 5068800 (expected 5068800)"'
  # compute-sanitizer stand-in: runs the program; in "mixed", racecheck fails
  # even on the clean probe (unsupported) and initcheck finds an error in test_b.
  # A run of any tool without --report-api-errors no reports the busy queries'
  # cudaErrorNotReady as API errors, as the real one does (run.sh turns that off).
  stub "$fake/compute-sanitizer" 'api=explicit; while [[ $1 == --* ]]; do case $1 in --tool) tool=$2; shift;; --report-api-errors) api=$2; shift;; --error-exitcode|--print-limit) shift;; esac; shift; done
prog=$(basename "$1")
if [[ $api != no ]]; then
  echo "========= Program hit cudaErrorNotReady (error 600) due to \"device not ready\" on CUDA API call to cudaEventQuery."
  echo "========= ERROR SUMMARY: 1 error"; exit 99; fi
if [[ '"$scenario"' == mixed && $tool == racecheck && $prog == dflash_gpu_probe ]]; then
  echo "========= Error: racecheck is not supported on this runtime (fake)"; exit 1; fi
if [[ '"$scenario"' == budget && $prog != dflash_gpu_probe ]]; then exec sleep 1000; fi
if [[ '"$scenario"' == mixed && $tool == initcheck && $prog == test_b ]]; then
  echo "========= Uninitialized __global__ memory read of size 4 bytes"; echo "========= ERROR SUMMARY: 1 error"; exit 99; fi
SANITIZED=1 "$@"; rc=$?
echo "========= ERROR SUMMARY: 0 errors"; exit $rc'
fi

budget_env=()
[[ $scenario == budget ]] && budget_env=(DFLASH_BUNDLE_BUDGET_S=40 DFLASH_BUNDLE_SANITIZER_BUDGET_S=20 DFLASH_BUNDLE_SANITIZER_JOBS=2)
started=$SECONDS
# An inherited LD_LIBRARY_PATH (a folder with another runtime) must not reach the programs.
env "${budget_env[@]}" PATH=$fake:/usr/bin:/bin LD_LIBRARY_PATH=$work/inherited "$b/run.sh" "$work/logs" "$work/out/logs.tar.gz" >"$work/out.txt" 2>&1
rc=$?
took=$((SECONDS - started))
cat "$work/logs/summary.txt"
fail=0
# Every run packs its logs and ends its output with the summary.
# (The listing is read whole first: with pipefail, grep -q leaving early
# would fail tar with SIGPIPE about one time in twenty-five.)
listing=$(tar -tzf "$work/out/logs.tar.gz" 2>/dev/null)
grep -qx 'logs/summary.txt' <<<"$listing" || { echo "no logs/summary.txt in the archive"; fail=1; }
[[ $(tail -n 1 "$work/out.txt") == "$(tail -n 1 "$work/logs/summary.txt")" && $(tail -n 1 "$work/out.txt") == RESULT* ]] ||
  { echo "the output does not end with the summary's RESULT line: $(tail -n 1 "$work/out.txt")"; fail=1; }
expect() {  # REGEX: some summary line must match
  grep -qE "$1" "$work/logs/summary.txt" || { echo "MISSING: a line matching /$1/"; fail=1; }
}
absent() { ! grep -qE "$1" "$work/logs/summary.txt" || { echo "UNEXPECTED: a line matching /$1/"; fail=1; }; }
case $scenario in
  pass)
    [[ $rc == 0 ]] || { echo "run.sh exit $rc, expected 0"; fail=1; }
    expect '^device: NVIDIA H200, 580.65.06'
    expect '^PASS +probe .*device 0: NVIDIA H200'
    expect '^PASS +test test_a +All tests passed \(12 assertions in 3 test cases\)'
    expect '^PASS +test test_b +All tests passed'
    expect '^PASS +example ex_plain cuda==cpu +300 steps, seed 7: 3 exact values identical, 1 floats within rel 0.0001 .*, 1 bitwise digests not compared'
    expect '^PASS +example ex_prof cuda==cpu'
    expect '^PASS +example ex_plain --hs-link rows cuda==cpu +300 steps, seed 7'
    expect '^PASS +example ex_plain --cuda-graphs cuda==cpu +300 steps, seed 7'
    expect '^figures +example ex_prof: tokens/s cuda 1234, cpu 1234 \(both runs at once\); target_forward.gpu cuda: 195.324 ms total = 15.4 % of wall; target_forward.gpu cpu: 195.324 ms total'
    expect '^cuBLAS: .*/site-packages/nvidia/cu13/lib/libcublas.so.13 and libcublasLt.so.13 \(python package nvidia.cu13; the file: .*/libcublas.so.13.1.0.3\), linked alone into the search path of 2 programs: bin/ex_plain bin/test_a'
    expect '^environment: inherited LD_LIBRARY_PATH=.*/inherited cleared'
    expect '^PASS +memcheck test_a \[concurrent\] +ERROR SUMMARY: 0 errors'

    expect '^PASS +torch reference: dflash_ops_driver_gpu vs torch cuda +107 cases \(90 random\), torch reference on cuda, 3.1 s; seed 5, [0-9]+ s'
    expect '^PASS +torch reference: dflash_ops_driver vs torch cpu +107 cases'
    expect '^figures +bench BM_pack<float>/4096/manual_time +100.0 us/iter, 3000.0 GB/s = 0.75 of D2D copy \(4000.0 GB/s\)'
    expect '^figures +bench BM_readback_batched +9.5 us/iter \(latency'
    absent '^PASS +bench'
    expect '^PASS +example gpu_pipeline +cuda: total 5068800 \(expected 5068800\)'
    for t in memcheck racecheck synccheck initcheck; do
      expect "^PASS +$t test_a +ERROR SUMMARY: 0 errors"
      expect "^PASS +$t test_b +ERROR SUMMARY: 0 errors"
    done
    absent '^(FAIL|SKIP|UNSUPPORTED)'
    expect '^RESULT: PASS$'
    ;;
  mixed)
    [[ $rc == 1 ]] || { echo "run.sh exit $rc, expected 1"; fail=1; }
    expect '^FAIL +example ex_prof cuda==cpu +the binary rejects --results \(exit 2\)'
    expect '^PASS +example ex_plain cuda==cpu'
    expect '^UNSUPPORTED +racecheck \(its GPU tests\) +on this runtime: the clean probe fails under it \(exit 1\): Error: racecheck is not supported'
    absent '^(PASS|FAIL) +racecheck test_'
    expect '^FAIL +initcheck test_b +ERROR SUMMARY: 1 error: Uninitialized __global__ memory read'
    expect '^PASS +initcheck test_a'
    expect '^UNSUPPORTED +memcheck test_a \[concurrent\] +memcheck ran the pair one kernel at a time: TIMED OUT: producers'
    expect '^FAIL +glibc +this machine has glibc [0-9.]+; the bundle needs >= 99.0'
    expect '^FAIL +torch reference: dflash_ops_driver_gpu vs torch cuda +exit 1: MISMATCH c7 kv_indices: \[3\] driver 2 vs reference 1 \[1 mismatches; 107 cases; seed 5\]'
    expect '^SKIP +torch reference: dflash_ops_driver vs torch cpu +skipped: torch not importable'
    absent '^skipped for time'
    expect '^total: .* 4 FAIL, 2 UNSUPPORTED, 1 SKIP, 0 N/A'
    expect '^RESULT: FAIL$'
    ;;
  nodevice)
    [[ $rc == 1 ]] || { echo "run.sh exit $rc, expected 1"; fail=1; }
    expect '^device: no CUDA device \(nvidia-smi exit 9: NVIDIA-SMI has failed'
    expect '^FAIL +probe .*no CUDA device'
    expect '^FAIL +test test_a +exit 1: no CUDA device'
    expect '^SKIP +compute-sanitizer .* no CUDA device'
    expect '^SKIP +torch reference .* no CUDA device'
    absent '^PASS'
    expect '^RESULT: FAIL: no CUDA device'
    ;;
  budget)
    # Each job's limit is what is left when it starts, not when it was queued:
    # the first two sanitizer jobs time out, every later one is skipped.
    [[ $rc == 1 ]] || { echo "run.sh exit $rc, expected 1"; fail=1; }
    ((took <= 40 + 4)) || { echo "run.sh took $took s on a 40 s budget"; fail=1; }
    expect '^PASS +test test_a'
    expect '^FAIL +memcheck test_a +timed out after [0-9]+ s'
    expect '^FAIL +initcheck test_a +timed out after [0-9]+ s'
    for t in racecheck synccheck; do expect "^SKIP +$t test_a +time budget exhausted"; done
    expect '^SKIP +memcheck test_a \[concurrent\] +time budget exhausted'
    for t in memcheck initcheck racecheck synccheck; do expect "^SKIP +$t test_b +time budget exhausted"; done
    expect '^skipped for time: racecheck test_a, synccheck test_a, memcheck test_a \[concurrent\], memcheck test_b, initcheck test_b, racecheck test_b, synccheck test_b$'
    expect '^total: .* 2 FAIL, 0 UNSUPPORTED, 7 SKIP'
    expect '^RESULT: FAIL$'
    ;;
  nocublas)
    # Only cuBLAS's users fail, each saying why, none of them run; the others pass.
    [[ $rc == 1 ]] || { echo "run.sh exit $rc, expected 1"; fail=1; }
    expect '^cuBLAS: no libcublas.so.13 found \(python3 .import nvidia.cu13. / .import nvidia.cublas., .*ldconfig\): the 2 programs linked with it fail'
    expect '^FAIL +test test_a +needs libcublas.so.13, not found on this machine \(see the cuBLAS line\): not run'
    expect '^FAIL +example ex_plain cuda==cpu +needs libcublas.so.13'
    expect '^FAIL +example ex_plain --hs-link rows cuda==cpu +needs libcublas.so.13'
    expect '^FAIL +example ex_plain --cuda-graphs cuda==cpu +needs libcublas.so.13'
    for t in memcheck racecheck synccheck initcheck; do
      expect "^FAIL +$t test_a +needs libcublas.so.13"
      expect "^PASS +$t test_b"
    done
    expect '^PASS +test test_b'
    expect '^PASS +example ex_prof cuda==cpu'
    absent 'error while loading shared libraries'
    expect '^total: .* 8 FAIL, 0 UNSUPPORTED, 0 SKIP'
    expect '^RESULT: FAIL$'
    ;;
  cuda12)
    # The CUDA 12 layout holds libcublas.so.12: not what the binaries need.
    [[ $rc == 1 ]] || { echo "run.sh exit $rc, expected 1"; fail=1; }
    expect '^cuBLAS: no libcublas.so.13 found'
    expect '^FAIL +test test_a +needs libcublas.so.13, not found on this machine'
    expect '^PASS +test test_b'
    expect '^RESULT: FAIL$'
    ;;
  onegpu)
    # One GPU: the MIN_DEVICES 2 test is not applicable; everything else passes.
    [[ $rc == 0 ]] || { echo "run.sh exit $rc, expected 0"; fail=1; }
    expect '^N/A +test test_c +not applicable on 1 GPU\(s\): needs 2'
    absent '^[A-Z/]+ +(memcheck|initcheck|racecheck|synccheck) test_c'
    expect '^not applicable on this machine: test_c $'
    absent '^(FAIL|SKIP|UNSUPPORTED)'
    expect '^total: .* 0 FAIL, 0 UNSUPPORTED, 0 SKIP, 1 N/A'
    expect '^RESULT: PASS \(1 N/A on this machine: see above\)$'
    ;;
  *) echo "unknown scenario $scenario"; exit 2 ;;
esac
((fail == 0)) && echo "fake bundle, $scenario: as expected"
exit $fail
