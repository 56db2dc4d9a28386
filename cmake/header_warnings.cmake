# Every public host header, alone in its own TU, compiled with the warnings a
# strict consumer turns on, as errors. add_subdirectory users get dflash's
# headers with -I (not -isystem), so a warning here breaks their -Werror build.
# Target dflash_header_warnings (part of `all`); dependencies' headers come in
# with -isystem from their imported targets, so only dflash's own are judged.
set(DFLASH_HEADER_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND DFLASH_HEADER_WARNING_FLAGS -Wsign-conversion)
endif()

# dflash_headers_needing_cccl(OUT headers...): those of the headers (paths
# relative to include/) that include CCCL (<thrust/..>, <cub/..>, <cuda/..>,
# <nv/..>) or test for it (__has_include), directly or through other dflash headers.
function(dflash_headers_needing_cccl out)
  set(_all ${ARGN})
  set(_needs)
  foreach(_h IN LISTS _all)
    file(STRINGS ${PROJECT_SOURCE_DIR}/include/${_h} _inc_${_h} REGEX "^#[ \t]*(include[ \t]*[<\"]|if)")
    if(_inc_${_h} MATCHES "(#[ \t]*include[ \t]*|__has_include\\()<(thrust|cub|cuda|nv)/")
      list(APPEND _needs ${_h})
    endif()
  endforeach()
  set(_grew TRUE)
  while(_grew)  # to a fixed point over dflash's own includes
    set(_grew FALSE)
    foreach(_h IN LISTS _all)
      if(_h IN_LIST _needs)
        continue()
      endif()
      foreach(_n IN LISTS _needs)
        string(FIND "${_inc_${_h}}" "${_n}" _at)
        if(NOT _at EQUAL -1)
          list(APPEND _needs ${_h})
          set(_grew TRUE)
          break()
        endif()
      endforeach()
    endforeach()
  endwhile()
  set(${out} ${_needs} PARENT_SCOPE)
endfunction()

function(dflash_add_header_warnings_check)
  file(GLOB_RECURSE _headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/dflash/*.hpp ${PROJECT_SOURCE_DIR}/include/dflash/*.cuh)
  dflash_headers_needing_cccl(_needs_cccl ${_headers})
  list(FILTER _headers INCLUDE REGEX "\\.hpp$")
  # Headers that include the CUDA runtime or NVTX (cuda_backend.hpp,
  # cuda_event_profiler.hpp, nvtx_profiler.hpp, ...) are checked only where the
  # toolkit is: a host-only build with a standalone CCCL has neither.
  find_package(CUDAToolkit QUIET)
  set(_sources)
  set(_cccl_sources)
  foreach(_h IN LISTS _headers)
    file(STRINGS ${PROJECT_SOURCE_DIR}/include/${_h} _needs_toolkit
         REGEX "^#[ \t]*include[ \t]*<(cuda_runtime|cuda_runtime_api|cuda|nvtx3/[^>]*)\\.h(pp)?>")
    if(_needs_toolkit AND NOT CUDAToolkit_FOUND)
      continue()
    endif()
    if(_h MATCHES "^dflash/mpi(/|\\.hpp$)" AND NOT DFLASH_ENABLE_MPI)
      continue()  # needs <mpi.h>: checked where MPI is found
    endif()
    if(_h IN_LIST _needs_cccl AND NOT DFLASH_HAVE_CCCL)
      continue()  # checked where CCCL is found
    endif()
    if(_h STREQUAL "dflash/bench/gbench.hpp")
      find_package(benchmark QUIET)
      if(NOT benchmark_FOUND)
        continue()  # needs <benchmark/benchmark.h>: checked where Google Benchmark is found
      endif()
    endif()
    if(_h STREQUAL "dflash/interop/dlpack.hpp" AND NOT DFLASH_HAVE_DLPACK)
      continue()  # needs <dlpack/dlpack.h> >= 1.0: checked where it is found
    endif()
    string(MAKE_C_IDENTIFIER "${_h}" _id)
    set(_tu ${CMAKE_CURRENT_BINARY_DIR}/header_warnings/${_id}.cpp)
    file(CONFIGURE OUTPUT ${_tu} CONTENT "#include <${_h}>  // alone: the header must be self-contained\n")
    if(_h IN_LIST _needs_cccl)
      list(APPEND _cccl_sources ${_tu})
    else()
      list(APPEND _sources ${_tu})
    endif()
  endforeach()
  # The host-core headers compile against dflash::core alone, without CCCL on
  # the include path, as a host-core consumer has them; the rest against
  # dflash::dflash. (Which is which is read from the includes; a core header that
  # starts to need CCCL fails the core's tests, which link dflash::core only.)
  add_library(dflash_header_warnings OBJECT ${_sources})
  target_link_libraries(dflash_header_warnings PRIVATE dflash::core)
  set(_checks dflash_header_warnings)
  if(DFLASH_HAVE_CCCL)
    add_library(dflash_header_warnings_ops OBJECT ${_cccl_sources})
    target_link_libraries(dflash_header_warnings_ops PRIVATE dflash::dflash)
    add_dependencies(dflash_header_warnings dflash_header_warnings_ops)
    list(APPEND _checks dflash_header_warnings_ops)
  endif()
  foreach(_t IN LISTS _checks)
    if(DFLASH_ENABLE_MPI)
      target_link_libraries(${_t} PRIVATE dflash::mpi)  # MPI's headers come in as -isystem
    endif()
    if(CUDAToolkit_FOUND)
      # -isystem: the toolkit's headers are not dflash's to judge.
      target_include_directories(${_t} SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
    endif()
    if(DFLASH_HAVE_DLPACK)
      target_include_directories(${_t} SYSTEM PRIVATE ${DFLASH_DLPACK_INCLUDE_DIR})
    endif()
    target_compile_options(${_t} PRIVATE ${DFLASH_HEADER_WARNING_FLAGS})
  endforeach()

  # The CUDA headers (*.cuh: kernels, CUB), each alone in a .cu TU, compiled by
  # nvcc where CUDA is enabled: nvcc's own warnings and the host compiler's are
  # errors. (-Wpedantic is left out: nvcc's generated host code trips it.)
  if(DFLASH_ENABLE_CUDA)
    file(GLOB_RECURSE _cuda_headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
         ${PROJECT_SOURCE_DIR}/include/dflash/*.cuh)
    set(_cuda_sources)
    foreach(_h IN LISTS _cuda_headers)
      if(_h STREQUAL "dflash/interop/dlpack.hpp" AND NOT DFLASH_HAVE_DLPACK)
      continue()  # needs <dlpack/dlpack.h> >= 1.0: checked where it is found
    endif()
    string(MAKE_C_IDENTIFIER "${_h}" _id)
      set(_tu ${CMAKE_CURRENT_BINARY_DIR}/header_warnings/${_id}.cu)
      file(CONFIGURE OUTPUT ${_tu} CONTENT "#include <${_h}>  // alone: the header must be self-contained\n")
      list(APPEND _cuda_sources ${_tu})
    endforeach()
    add_library(dflash_header_warnings_cuda OBJECT ${_cuda_sources})
    target_link_libraries(dflash_header_warnings_cuda PRIVATE dflash::dflash CUDA::cudart)
    set(_host_flags ${DFLASH_HEADER_WARNING_FLAGS})
    list(REMOVE_ITEM _host_flags -Wpedantic)
    list(JOIN _host_flags "," _host_flags)
    target_compile_options(dflash_header_warnings_cuda PRIVATE
      $<$<COMPILE_LANGUAGE:CUDA>:--Werror=all-warnings -Xcompiler=${_host_flags}>)
  endif()
endfunction()
