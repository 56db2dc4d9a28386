#!/usr/bin/env bash
# Installs everything dflash's build needs on a fresh Debian 12 machine, then
# configures and builds the release preset. Idempotent: safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake ninja-build ccache git
  clang                     # clang++ 14: the clang preset (CI builds and tests with it too)
  libboost1.81-dev          # Boost.Hana (header-only)
  catch2                    # Catch2 v2.13, <catch2/catch.hpp>
  libbenchmark-dev          # Google Benchmark
  libcli11-dev              # CLI parser of the example
  nlohmann-json3-dev        # tests parse the JSON reports with it
  valgrind                  # scripts/zero_cost_check.sh (callgrind)
  gnuplot-nox               # scripts/bench.sh plots
  libtbb-dev libconcurrentqueue-dev  # benchmark-only anchors (oneTBB, moodycamel); the build works without them
  python3                   # scripts/ helpers (checks only, never the library)
  python3-dev pybind11-dev  # the Python module over the example pipeline (examples/python)
  libopenmpi-dev openmpi-bin  # optional MPI layer (include/dflash/mpi), its tests and benchmark
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -q
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

# nvcc is optional: with it, CUDA targets are compiled too (auto-detected).
if [[ -x /usr/local/cuda/bin/nvcc ]]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if [[ ! -f /usr/local/cuda/lib64/cmake/cccl/cccl-config.cmake ]] && [[ -z "${CCCL_DIR:-}" ]]; then
  echo "setup: CCCL (Thrust/CUB/libcu++) not found: install the CUDA toolkit (13.x) or set CCCL_DIR" >&2
  exit 1
fi

# DLPack's C header, for dflash/interop/dlpack.hpp (optional: without it those headers' tests are
# off, with a configure message). Taken from a pinned wheel that ships it (apache-tvm-ffi, DLPack
# 1.3): Debian's libdlpack-dev is 0.6, older than DLManagedTensorVersioned. Only the header is
# used; nothing is installed into Python.
dlpack_root=build/_deps/dlpack
if [[ ! -f $dlpack_root/include/dlpack/dlpack.h ]]; then
  if ! python3 scripts/fetch_dlpack.py "$dlpack_root"; then
    echo "setup: could not fetch the DLPack header (offline?): DLPack export is built without its tests" >&2
  fi
fi

# NumPy for the Python example and the module's tests, into the python3 on PATH (the one the
# module is built for; Debian's python3-numpy serves only Debian's own interpreter). Pinned:
# 2.x takes versioned DLPack capsules. Optional: without it those tests are off.
if ! python3 -c "import numpy" 2>/dev/null; then
  if ! python3 -m pip install --quiet --disable-pip-version-check "numpy==2.2.6"; then
    echo "setup: could not install NumPy (offline?): the Python example's tests are off" >&2
  fi
fi

cmake --preset release
cmake --build --preset release
