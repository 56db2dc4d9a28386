# ctest driver: a dependency installed after dflash's first configure is used by the next
# configure of the same build folder, without clearing its cache.
#   cmake -DWHAT=mpi|cuda -DSOURCE_DIR=<dflash> -DWORK=<scratch> -P reconfigure.cmake
# The first configure runs with the dependency out of sight (MPI: find_package(MPI)
# disabled; CUDA: the compiler lookup fails), the second as after installing it. dflash's summary
# line must say "<WHAT> OFF", then "<WHAT> ON"; with an option that cached the first
# answer the second stays OFF and the part's tests silently vanish from ctest.
cmake_minimum_required(VERSION 3.25)  # policies: quoted if() arguments are strings
file(REMOVE_RECURSE ${WORK})
set(common -S ${SOURCE_DIR} -B ${WORK} -DDFLASH_BUILD_TESTS=OFF -DDFLASH_BUILD_EXAMPLES=OFF
    -DDFLASH_BUILD_BENCHMARKS=OFF -DDFLASH_CHECK_HEADER_WARNINGS=OFF -DDFLASH_BUILD_ZERO_COST=OFF)
if(WHAT STREQUAL "mpi")
  set(label MPI)
  set(hidden ${CMAKE_COMMAND} ${common} -DDFLASH_ENABLE_CUDA=OFF
      -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  set(visible ${CMAKE_COMMAND} ${common} -DCMAKE_DISABLE_FIND_PACKAGE_MPI=OFF)
elseif(WHAT STREQUAL "cuda")
  set(label CUDA)
  # CMake also looks in the toolkit's default folder, so taking nvcc off PATH cannot hide
  # it; a CUDACXX naming no compiler makes the lookup fail as on a machine without one.
  set(hidden ${CMAKE_COMMAND} -E env CUDACXX=${WORK}/no-such-nvcc
      ${CMAKE_COMMAND} ${common} -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON)
  set(visible ${CMAKE_COMMAND} ${common})
else()
  message(FATAL_ERROR "reconfigure.cmake: WHAT=${WHAT}: expected mpi or cuda")
endif()

foreach(step hidden visible)
  execute_process(COMMAND ${${step}} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "configure with ${label} ${step} failed (${rc}):\n${out}")
  endif()
  if(NOT out MATCHES "dflash [0-9.]+: [^\n]*${label} (ON|OFF)")
    message(FATAL_ERROR "configure with ${label} ${step}: no summary line naming ${label}:\n${out}")
  endif()
  set(expected OFF)
  if(step STREQUAL "visible")
    set(expected ON)
  endif()
  if(NOT CMAKE_MATCH_1 STREQUAL expected)
    message(FATAL_ERROR "configure with ${label} ${step}: dflash says ${label} ${CMAKE_MATCH_1}, expected "
                        "${expected}:\n${out}")
  endif()
  message(STATUS "${label} ${step}: dflash says ${label} ${CMAKE_MATCH_1}")
endforeach()
