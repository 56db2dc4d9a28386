# Every public host header, alone in its own TU, compiled with the warnings a
# strict consumer turns on, as errors. add_subdirectory users get dflash's
# headers with -I (not -isystem), so a warning here breaks their -Werror build.
# Target dflash_header_warnings (part of `all`); dependencies' headers come in
# with -isystem from their imported targets, so only dflash's own are judged.
set(DFLASH_HEADER_WARNING_FLAGS -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Werror)
if(CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  list(APPEND DFLASH_HEADER_WARNING_FLAGS -Wsign-conversion)
endif()

function(dflash_add_header_warnings_check)
  file(GLOB_RECURSE _headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
       ${PROJECT_SOURCE_DIR}/include/dflash/*.hpp)
  # Headers that include the CUDA runtime or NVTX (cuda_backend.hpp,
  # cuda_event_profiler.hpp, nvtx_profiler.hpp, ...) are checked only where the
  # toolkit is: a host-only build with a standalone CCCL has neither.
  find_package(CUDAToolkit QUIET)
  set(_sources)
  foreach(_h IN LISTS _headers)
    file(STRINGS ${PROJECT_SOURCE_DIR}/include/${_h} _needs_toolkit
         REGEX "^#[ \t]*include[ \t]*<(cuda_runtime|cuda_runtime_api|cuda|nvtx3/[^>]*)\\.h(pp)?>")
    if(_needs_toolkit AND NOT CUDAToolkit_FOUND)
      continue()
    endif()
    if(_h MATCHES "^dflash/mpi(/|\\.hpp$)" AND NOT DFLASH_ENABLE_MPI)
      continue()  # needs <mpi.h>: checked where MPI is found
    endif()
    string(MAKE_C_IDENTIFIER "${_h}" _id)
    set(_tu ${CMAKE_CURRENT_BINARY_DIR}/header_warnings/${_id}.cpp)
    file(CONFIGURE OUTPUT ${_tu} CONTENT "#include <${_h}>  // alone: the header must be self-contained\n")
    list(APPEND _sources ${_tu})
  endforeach()
  add_library(dflash_header_warnings OBJECT ${_sources})
  target_link_libraries(dflash_header_warnings PRIVATE dflash::dflash)
  if(DFLASH_ENABLE_MPI)
    target_link_libraries(dflash_header_warnings PRIVATE dflash::mpi)  # MPI's headers come in as -isystem
  endif()
  if(CUDAToolkit_FOUND)
    # -isystem: the toolkit's headers are not dflash's to judge.
    target_include_directories(dflash_header_warnings SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  endif()
  target_compile_options(dflash_header_warnings PRIVATE ${DFLASH_HEADER_WARNING_FLAGS})

  # The CUDA headers (*.cuh: kernels, CUB), each alone in a .cu TU, compiled by
  # nvcc where CUDA is enabled: nvcc's own warnings and the host compiler's are
  # errors. (-Wpedantic is left out: nvcc's generated host code trips it.)
  if(DFLASH_ENABLE_CUDA)
    file(GLOB_RECURSE _cuda_headers RELATIVE ${PROJECT_SOURCE_DIR}/include CONFIGURE_DEPENDS
         ${PROJECT_SOURCE_DIR}/include/dflash/*.cuh)
    set(_cuda_sources)
    foreach(_h IN LISTS _cuda_headers)
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
