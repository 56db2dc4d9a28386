# dflash's public headers include no platform header: only dflash's own, the
# C++ standard library's and those of its dependencies (Boost, CCCL, the CUDA
# runtime and NVTX, MPI, DLPack for interop/dlpack.hpp, and Google Benchmark for bench/gbench.hpp alone). A platform header (<unistd.h>, <sys/syscall.h>,
# <linux/...>, <x86intrin.h>, ...) would land in every user's translation unit
# and take names such as pipe, read, close or sleep at global scope.
#   cmake -DROOT=<include dir> -P public_includes.cmake
# Two libstdc++ parts are standard-library headers too: detail/std_chrono.hpp and
# detail/std_function.hpp include them by name instead of <chrono> and <functional>
# (named one by one: glibc's own <bits/...> headers are platform headers).
file(GLOB_RECURSE headers RELATIVE ${ROOT} ${ROOT}/dflash/*.hpp ${ROOT}/dflash/*.cuh)
set(allowed "^(dflash/|boost/|cuda/|thrust/|cub/|nv/|nvtx3/|benchmark/benchmark\\.h$|[a-z_]+$|cuda_runtime\\.h$|cuda_runtime_api\\.h$|mpi\\.h$|dlpack/dlpack\\.h$|bits/chrono\\.h$|bits/std_function\\.h$)")
set(bad)
foreach(h IN LISTS headers)
  file(STRINGS ${ROOT}/${h} lines REGEX "^[ \t]*#[ \t]*include[ \t]*<[^>]+>")
  foreach(l IN LISTS lines)
    string(REGEX MATCH "<([^>]+)>" _ "${l}")
    set(inc "${CMAKE_MATCH_1}")
    if(NOT inc MATCHES "${allowed}")
      list(APPEND bad "${h}: <${inc}>")
    endif()
  endforeach()
endforeach()
list(LENGTH headers n)
if(bad)
  list(JOIN bad "\n  " bad)
  message(FATAL_ERROR "platform headers in public headers:\n  ${bad}")
endif()
message(STATUS "${n} public headers, no platform header")
