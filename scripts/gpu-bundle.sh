#!/usr/bin/env bash
# Builds, HERE (no GPU needed), everything dflash runs on a GPU, into a bundle
# that runs THERE (an H200/H100 machine with a CUDA driver, nvcc, CMake,
# compute-sanitizer and python3, but no Boost/Catch2/CLI11/Google Benchmark
# and no network):
#
#   scripts/gpu-bundle.sh OUT [CUDA_ARCH=90]     # here
#   OUT/run.sh LOGDIR [ARCHIVE]                  # there; LOGDIR/summary.txt,
#                                                # every log packed into ARCHIVE
#
# OUT holds:
#   bin/      every test labelled "gpu" (ctest -L '^gpu$'; new GPU tests land here
#             without editing this script), every GPU benchmark
#             (dflash_add_gpu_benchmark), both example binaries, the guide's
#             gpu_pipeline (host twin, then cuda_backend), dflash_gpu_probe,
#             the ops drivers dflash_ops_driver_gpu / dflash_ops_driver (torch step)
#   lib/      libcudart.so.13; for the GPU benchmarks, libbenchmark.so.1debian and
#             the libstdc++.so.6 / libgcc_s.so.1 it was built against
#   run.sh, compare_results.py, bench_fractions.py, torch_reference.py, tests.tsv, benchmarks.txt,
#   examples.txt, cublas.txt (the programs that load cuBLAS from that machine), MANIFEST
#
# Linking: libstdc++ and libgcc are linked statically (DFLASH_STATIC_LIBSTDCXX),
# so the tests, which compute-sanitizer runs with its own injected libraries,
# share no C++ runtime with anything on that machine. The exception is the GPU
# benchmarks: Debian ships Google Benchmark only as a shared library (no
# libbenchmark.a), built against the shared libstdc++, and one process must hold
# one libstdc++; so they use shared ones, carried in lib/. libcudart is shared
# and carried rather than taken from that machine: the binaries run against
# exactly the runtime they were compiled with, whatever 13.x is installed there,
# and test_cuda_event_profiler_gpu needs one shared runtime for its two TUs.
# Every binary's RUNPATH is $ORIGIN/../lib only, so no LD_LIBRARY_PATH is
# needed (it would leak into compute-sanitizer and nvidia-smi, and a folder on
# it that holds another libcudart would win over RUNPATH's: run.sh clears an
# inherited one). The script
# checks with ldd that every binary needs nothing outside lib/ but glibc
# (libcuda.so.1, the driver, is loaded by cudart at run time), records the
# glibc version the bundle needs (run.sh checks it), prints the size and fails
# above 48 MiB.
# cuBLAS is the exception to carrying (libcublasLt alone is ~500 MiB): the
# programs linked with it (the example's --device cuda target forward) must
# link it dynamically (a defined cublas* symbol in a binary fails the script),
# the example's binaries must be among them, cublas.txt names them, and run.sh
# finds libcublas.so.13 / libcublasLt.so.13 on that machine (the nvidia-cublas
# python package: nvidia/cu13/lib for CUDA 13 wheels) and puts a folder of links
# to those two files alone (not their folder: a wheel's lib folder holds its own
# libcudart) on those programs' LD_LIBRARY_PATH.
# What only cuBLAS itself loads (libcublasLt, its libgcc_s) comes with it there.
#
# DFLASH_BUNDLE_BUILD_DIR (default build/gpu-bundle), DFLASH_BUNDLE_JOBS (2);
# DFLASH_BUNDLE_STOP_AFTER=configure stops once CMake has configured and the
# GPU test manifests are read, leaving OUT alone (a cheap check of a fresh clone).
set -euo pipefail
out=${1:?usage: scripts/gpu-bundle.sh OUT [CUDA_ARCH=90]}
arch=${2:-90}
root=$(cd "$(dirname "$0")/.." && pwd)
export PATH=/usr/local/cuda/bin:$PATH
build=${DFLASH_BUNDLE_BUILD_DIR:-$root/build/gpu-bundle}
jobs=${DFLASH_BUNDLE_JOBS:-2}
limit_mib=48
die() { echo "gpu-bundle: error: $*" >&2; exit 1; }
command -v nvcc >/dev/null || die "nvcc not found (looked in PATH and /usr/local/cuda/bin)"
command -v python3 >/dev/null || die "python3 not found"
# OUT is replaced: only when it is empty or an earlier bundle.
if [[ -e $out ]] && ! [[ -f $out/MANIFEST && -f $out/run.sh ]] && [[ -n $(ls -A "$out" 2>/dev/null) ]]; then
  die "$out exists and is not a GPU bundle: not replacing it"
fi

echo "gpu-bundle: configure $build (Release, CUDA on, sm_$arch)"
# The logs sit next to the build folder: its parent (build/ in a fresh clone) may not exist yet.
mkdir -p "$(dirname "$build")" || die "cannot create $(dirname "$build")"
# MPI off: the GPU machine has no OpenMPI, and the example would link libmpi for --ranks.
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DDFLASH_ENABLE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DDFLASH_BUILD_TESTS=ON -DDFLASH_BUILD_BENCHMARKS=ON -DDFLASH_BUILD_EXAMPLES=ON -DDFLASH_STATIC_LIBSTDCXX=ON \
  -DDFLASH_ENABLE_MPI=OFF \
  -DCMAKE_SKIP_BUILD_RPATH=OFF -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON \
  '-DCMAKE_INSTALL_RPATH=$ORIGIN/../lib' -DCMAKE_INSTALL_RPATH_USE_LINK_PATH=OFF \
  >"$build.configure.log" 2>&1 || { cat "$build.configure.log"; die "configure failed"; }

# ---- what goes in: discovered, never listed here ----------------------------
# GPU test and benchmark programs: the manifests CMake writes for every
# dflash_add_gpu_test / dflash_add_gpu_benchmark; the example's two binaries.
for m in dflash-gpu-tests.txt dflash-gpu-benchmarks.txt; do
  [[ -f $build/$m ]] || die "$build/$m missing (tests/benchmarks not configured?)"
done
mapfile -t test_targets < <(cut -f1 "$build/dflash-gpu-tests.txt")
mapfile -t bench_names < <(cut -f1 "$build/dflash-gpu-benchmarks.txt")
((${#test_targets[@]} > 0)) || die "no GPU test in $build (is CUDA enabled?)"
examples=(dflash_train_pipeline dflash_train_pipeline_profiled)
# run.sh's PyTorch step: the ops drivers (tests/torch_reference), GPU and host twins.
tools=(dflash_ops_driver_gpu dflash_ops_driver)
# DFLASH_BUNDLE_STOP_AFTER=configure: stop here, OUT untouched (the fresh-clone
# test checks everything up to the build without minutes of nvcc).
if [[ ${DFLASH_BUNDLE_STOP_AFTER:-} == configure ]]; then
  echo "gpu-bundle: configured $build (${#test_targets[@]} GPU test programs); stopping (DFLASH_BUNDLE_STOP_AFTER=configure)"
  exit 0
fi
[[ -z ${DFLASH_BUNDLE_STOP_AFTER:-} ]] || die "DFLASH_BUNDLE_STOP_AFTER=${DFLASH_BUNDLE_STOP_AFTER}: only 'configure' is known"
targets=(dflash_gpu_probe "${test_targets[@]}" "${bench_names[@]}" "${examples[@]}" gpu_pipeline "${tools[@]}")

echo "gpu-bundle: build ${#targets[@]} targets with -j$jobs: ${targets[*]}"
cmake --build "$build" --parallel "$jobs" --target "${targets[@]}" >"$build.build.log" 2>&1 ||
  { tail -n 60 "$build.build.log"; die "build failed (log: $build.build.log)"; }

# The tests: every ctest test labelled "gpu", with its arguments, one line
# each: name, program (absolute), the sanitizer tools its program declares
# (dflash_add_gpu_test), arguments (shell-quoted, last: they may be empty).
# Each must run a program built above, or the bundle would miss it.
tests_tsv=$(mktemp)
trap 'rm -f "$tests_tsv"' EXIT
ctest --test-dir "$build" -L '^gpu$' --show-only=json-v1 | python3 -c '
import json, shlex, sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1]) if line.strip()]
tools = {r[1].strip(): (r[2].strip() if len(r) > 2 else "") or "memcheck initcheck" for r in rows}
for t in json.load(sys.stdin)["tests"]:
    cmd = t.get("command") or []
    if not cmd or cmd[0] not in tools:
        sys.exit("gpu-bundle: test %s (label gpu) does not run a program of dflash_add_gpu_test: %s"
                 % (t["name"], cmd[:1] or "no program built"))
    print("\t".join([t["name"], cmd[0], tools[cmd[0]], shlex.join(cmd[1:])]))
' "$build/dflash-gpu-tests.txt" >"$tests_tsv" || die "cannot list the GPU tests"
[[ -s $tests_tsv ]] || die "no test labelled gpu in $build"
mapfile -t test_exes < <(cut -f2 "$tests_tsv" | sort -u)

# ---- assemble -------------------------------------------------------------
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
out=$(cd "$out" && pwd)
bin_of() {  # target -> built file
  # (-quit, not | head: with pipefail and set -e, find killed by SIGPIPE
  # after head took its line would end the script without a word.)
  find "$build" -type f -name "$1" -perm -u+x -not -path '*/CMakeFiles/*' -print -quit
}
for exe in "${test_exes[@]}"; do cp "$exe" "$out/bin/"; done
while IFS=$'\t' read -r name path; do cp "$path" "$out/bin/$name"; done <"$build/dflash-gpu-benchmarks.txt"
for t in dflash_gpu_probe "${examples[@]}" gpu_pipeline "${tools[@]}"; do
  f=$(bin_of "$t")
  [[ -n $f ]] || die "built $t but cannot find it under $build"
  cp "$f" "$out/bin/"
done
# Paths relative to the bundle.
awk -F'\t' -v OFS='\t' '{ n = split($2, p, "/"); $2 = "bin/" p[n]; print }' "$tests_tsv" >"$out/tests.tsv"
printf 'bin/%s\n' "${bench_names[@]}" >"$out/benchmarks.txt"
printf 'bin/%s\n' "${examples[@]}" >"$out/examples.txt"
cp "$root/scripts/bundle/run.sh" "$root/scripts/bundle/compare_results.py" "$root/scripts/bundle/bench_fractions.py" \
  "$root/scripts/bundle/torch_reference.py" "$out/"
chmod +x "$out/run.sh" "$out/compare_results.py" "$out/bench_fractions.py" "$out/torch_reference.py"

# ---- shared libraries: carry all but glibc, then prove the bundle is closed ---
glibc_re='^(linux-vdso\.so\.1|ld-linux-x86-64\.so\.2|libc\.so\.6|libm\.so\.6|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1)$'
cublas_re='^(libcublas\.so\.13|libcublasLt\.so\.13)$'
deps() {  # file -> "soname path" per line, for every library the loader would load
  env -u LD_LIBRARY_PATH ldd "$1" | awk '/=>/ { print $1, $3; next } { print $1, "" }'
}
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
# cuBLAS: linked dynamically or not at all; its users listed; what only it loads left to it.
: >"$out/cublas.txt"
cublas_only=""  # sonames libcublas.so.13 loads that are not glibc (libcublasLt, libgcc_s)
for f in "$out"/bin/*; do
  if readelf -Ws "$f" | awk '$7 != "UND" && $8 ~ /^cublas[A-Z]/ { found = 1 } END { exit !found }'; then
    die "$(basename "$f") defines cuBLAS functions: cuBLAS must be linked dynamically (CUDA::cublas), not carried inside"
  fi
  if needed "$f" | grep -E "$cublas_re" >/dev/null; then  # (not -q: with pipefail an early exit could fail readelf)
    echo "bin/$(basename "$f")" >>"$out/cublas.txt"
    if [[ -z $cublas_only ]]; then
      lib=$(env -u LD_LIBRARY_PATH ldd "$f" | awk '$1 == "libcublas.so.13" { print $3 }')
      [[ -n $lib && -f $lib ]] || die "$(basename "$f") needs libcublas.so.13, which is not found here"
      cublas_only=$(deps "$lib" | awk '{ print $1 }' | xargs -n 1 basename | grep -vE "$glibc_re" | paste -sd ' ' -)
    fi
  fi
done
for t in "${examples[@]}"; do
  grep -qx "bin/$t" "$out/cublas.txt" || die "$t does not link libcublas.so.13: its --device cuda target forward is missing"
done
skip_dep() {  # FILE SONAME: not carried (glibc, cuBLAS, or what only cuBLAS loads for a cuBLAS user)
  [[ $2 =~ $glibc_re || $2 =~ $cublas_re ]] && return 0
  grep -qx "bin/$(basename "$1")" "$out/cublas.txt" || return 1
  [[ " $cublas_only " == *" $2 "* ]] && ! needed "$1" | grep -x "$2" >/dev/null
}
for f in "$out"/bin/*; do
  while read -r so path; do
    so=$(basename "$so")
    skip_dep "$f" "$so" && continue
    [[ $path == "not" || -z $path ]] && die "$(basename "$f") needs $so, which is not found here"
    [[ -f $out/lib/$so ]] || cp -L "$path" "$out/lib/$so"
  done < <(deps "$f")
done
bad=0
for f in "$out"/bin/*; do
  runpath=$(readelf -d "$f" | sed -n 's/.*(RUNPATH).*\[\(.*\)\]/\1/p')
  [[ $runpath == '$ORIGIN/../lib' ]] || { echo "  $(basename "$f"): RUNPATH is '$runpath', want \$ORIGIN/../lib"; bad=1; }
  while read -r so path; do
    so=$(basename "$so")
    skip_dep "$f" "$so" && continue
    [[ -n $path && $path != not ]] && path=$(realpath -m "$path")
    if [[ $path != "$out/lib/"* ]]; then
      echo "  $(basename "$f"): $so resolves to '${path:-?}', not into the bundle"
      bad=1
    fi
  done < <(deps "$f")
done
((bad == 0)) || die "the bundle is not self-contained (see above)"
glibc_needed=$(objdump -T "$out"/bin/* "$out"/lib/* 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -n 1)
echo "gpu-bundle: ldd ok: bin/* need only glibc (>= ${glibc_needed#GLIBC_}) and lib/: $(cd "$out/lib" && echo *)"
echo "gpu-bundle: cuBLAS (from that machine, dynamically linked): $(paste -sd ' ' "$out/cublas.txt")"

{
  echo "dflash GPU bundle"
  echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "built $(date -u +%FT%TZ) on $(hostname) for sm_$arch"
  echo "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p'), $(g++ --version | head -n 1)"
  echo "needs glibc >= ${glibc_needed#GLIBC_} and a CUDA 13 driver"
  echo "needs libcublas.so.13 and libcublasLt.so.13 (nvidia-cublas python package) for: $(paste -sd ' ' "$out/cublas.txt")"
} >"$out/MANIFEST"

bytes=$(du -sb "$out" | cut -f1)
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
echo "gpu-bundle: $out: $(find "$out/bin" -type f | wc -l) binaries, $(wc -l <"$out/tests.tsv") GPU tests, $mib MiB (limit $limit_mib MiB)"
((bytes <= limit_mib * 1048576)) || die "bundle is $mib MiB, over the $limit_mib MiB limit"
echo "gpu-bundle: run it on the GPU machine: $out/run.sh LOGDIR"
