# ctest driver for dflash as a dependency of another project.
#   -DMODE=find_package   install dflash from BUILD_DIR into a scratch prefix; a
#                         consumer finds it with find_package, builds (with a .cu
#                         TU when CUDA_COMPILER is given) and runs; the installed
#                         package must find CCCL where the build did (CCCL_DIR).
#   -DMODE=add_subdirectory  the consumer adds dflash's SOURCE_DIR (with CUDA_COMPILER: a .cu TU).
#   -DMODE=fetch_content  the consumer gets dflash with FetchContent from a tarball of what a
#                         release carries (CMakeLists.txt, cmake/, include/, LICENSE).
#   -DMODE=standalone_cccl   dflash configured against a CCCL 3 outside the toolkit
#                         (a copy of CCCL_DIR's layout, as a CCCL release has it) with
#                         -DCCCL_DIR, installed; the consumer must get that CCCL, not
#                         the toolkit's. A plain configure, no DFLASH_* options, where
#                         Catch2, nlohmann-json, CLI11 and Google Benchmark are not found.
#   -DMODE=no_toolkit     as standalone_cccl, but as on a machine without the CUDA
#                         toolkit: CUDA off, FindCUDAToolkit disabled, nvcc off PATH,
#                         the toolkit's include folder in no compile command; the
#                         header check (dflash_header_warnings) must build. Slow
#                         (every public header): run by .ci/run, not by ctest.
#   -DMODE=no_cccl        the host core alone, as on a machine with neither CCCL nor the
#                         CUDA toolkit: the toolkit hidden as for no_toolkit, CCCL not
#                         looked for (and unreachable from the compiler); dflash configures
#                         with its tests, builds and runs HOST_TESTS (a ;-list of test
#                         targets), installs, and a consumer of dflash::dflash alone builds
#                         and runs; a TU with <dflash/dflash.hpp> linked to dflash::dflash must
#                         fail to build naming the missing CCCL. Slow (builds tests): run by
#                         .ci/run, not by ctest.
# Every mode builds the consumer's TUs with -Wall -Wextra -Werror; find_package also checks
# that COMPONENTS core loads dflash::core alone, without looking for CCCL.
# Common: [-DMPI=ON: the consumer also uses dflash::mpi] -DWORK=scratch -DSOURCE=consumer dir -DCXX=compiler [-DCUDA_COMPILER=nvcc]
#         [-DCUDA_ARCHS=90] -DCCCL_DIR=<the build's CCCL_DIR> -DSOURCE_DIR=dflash source
file(REMOVE_RECURSE ${WORK})
function(run what)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc)
    message(FATAL_ERROR "${what} failed (${rc}):\n${out}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

set(consumer_args -DCMAKE_CXX_COMPILER=${CXX})
if(CUDA_COMPILER)
  list(APPEND consumer_args -DCONSUMER_CUDA=ON -DCMAKE_CUDA_COMPILER=${CUDA_COMPILER})
  if(CUDA_ARCHS)
    list(APPEND consumer_args -DCMAKE_CUDA_ARCHITECTURES=${CUDA_ARCHS})
  endif()
endif()
if(MPI AND NOT MODE MATCHES "^(no_toolkit|no_cccl)$")
  list(APPEND consumer_args -DCONSUMER_MPI=ON)
endif()
set(expect_cccl "${CCCL_DIR}")

# As on a machine without the CUDA toolkit: nvcc's folder off PATH, FindCUDAToolkit finds
# nothing (it would look in /usr/local/cuda), and the compiler's own search path without
# folders that reach the toolkit (an image that links its headers into /usr/local/include).
# Sets env (a command prefix) and flags (CMAKE_CXX_FLAGS: the search path, given explicitly).
macro(hide_toolkit)
  string(REGEX REPLACE "[^:]*cuda[^:]*:?" "" path "$ENV{PATH}")
  set(env ${CMAKE_COMMAND} -E env --unset=CUDA_PATH --unset=CUDAToolkit_ROOT "PATH=${path}")
  execute_process(COMMAND ${CXX} -xc++ -E -v /dev/null OUTPUT_QUIET ERROR_VARIABLE v)
  string(REGEX MATCH "#include <...> search starts here:\n(.*)End of search list" _ "${v}")
  string(REGEX REPLACE "\n" ";" dirs "${CMAKE_MATCH_1}")
  set(flags -nostdinc)
  foreach(d IN LISTS dirs)
    string(STRIP "${d}" d)
    if(d AND NOT EXISTS ${d}/cuda_runtime.h AND NOT EXISTS ${d}/cuda_runtime_api.h)
      list(APPEND flags -isystem ${d})
    endif()
  endforeach()
  list(JOIN flags " " flags)
  separate_arguments(flag_list UNIX_COMMAND "${flags}")
endmacro()

# expect_unreachable(HEADER): HEADER must not compile with the hidden search path.
function(expect_unreachable header)
  file(WRITE ${WORK}/probe.cpp "#include <${header}>\n")
  execute_process(COMMAND ${CXX} ${flag_list} -fsyntax-only ${WORK}/probe.cpp RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(rc EQUAL 0)
    message(FATAL_ERROR "${header} is still reachable with ${flags}")
  endif()
endfunction()

if(MODE STREQUAL "no_cccl")
  hide_toolkit()
  foreach(h cuda_runtime.h thrust/version.h cub/version.cuh cuda/std/atomic)
    expect_unreachable(${h})
  endforeach()
  set(no_deps)
  foreach(pkg CCCL CUDAToolkit CLI11 benchmark)
    list(APPEND no_deps -DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON)
  endforeach()
  set(BUILD_DIR ${WORK}/dflash-build)
  run("configuring dflash without CCCL and without the toolkit"
      ${env} ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${BUILD_DIR} -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
      -DDFLASH_ENABLE_CUDA=OFF -DDFLASH_ENABLE_MPI=OFF -DDFLASH_BUILD_TESTS=ON -DDFLASH_BUILD_ZERO_COST=OFF
      -DDFLASH_CHECK_HEADER_WARNINGS=OFF ${no_deps} "-DCMAKE_CXX_FLAGS=${flags}")
  if(NOT out MATCHES "CCCL OFF")
    message(FATAL_ERROR "the configure did not report CCCL OFF:\n${out}")
  endif()
  if(NOT HOST_TESTS)
    message(FATAL_ERROR "MODE=no_cccl needs -DHOST_TESTS=<test targets>")
  endif()
  run("building ${HOST_TESTS} without CCCL" ${env} ${CMAKE_COMMAND} --build ${BUILD_DIR} --target ${HOST_TESTS})
  list(JOIN HOST_TESTS "|" re)
  run("running ${HOST_TESTS}" ${CMAKE_CTEST_COMMAND} --test-dir ${BUILD_DIR} -R "^(${re})$" --output-on-failure)
  message(STATUS "${out}")
  list(LENGTH HOST_TESTS n)
  if(NOT out MATCHES "100% tests passed, 0 tests failed out of ${n}\n")
    message(FATAL_ERROR "expected ${n} host tests to pass:\n${out}")
  endif()
  list(APPEND consumer_args -DCONSUMER_FULL=OFF "-DCMAKE_CXX_FLAGS=${flags}")
  set(expect_cccl "")
endif()

if(MODE MATCHES "^(standalone_cccl|no_toolkit)$")
  # A CCCL 3 release's layout: <root>/include/{cub,cuda,nv,thrust}, <root>/lib/cmake/<pkg>/.
  set(root ${WORK}/cccl-standalone)
  get_filename_component(cmake_root "${CCCL_DIR}/.." ABSOLUTE)
  foreach(pkg cccl cub thrust libcudacxx)
    file(COPY ${cmake_root}/${pkg} DESTINATION ${root}/lib/cmake)
  endforeach()
  find_path(inc cuda/std/atomic PATHS ${cmake_root}/../../include ${cmake_root}/../../include/cccl NO_DEFAULT_PATH REQUIRED)
  file(MAKE_DIRECTORY ${root}/include)
  foreach(d cub cuda nv thrust)
    file(CREATE_LINK ${inc}/${d} ${root}/include/${d} SYMBOLIC)
  endforeach()
  set(expect_cccl ${root}/lib/cmake/cccl)
  set(env)
  set(extra)
  if(MODE STREQUAL "no_toolkit")
    hide_toolkit()
    set(extra -DCMAKE_DISABLE_FIND_PACKAGE_CUDAToolkit=ON -DDFLASH_CHECK_HEADER_WARNINGS=ON -DDFLASH_ENABLE_MPI=OFF
              -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "-DCMAKE_CXX_FLAGS=${flags}")
  endif()
  # A plain configure (no DFLASH_BUILD_* options) on a machine without the test, example and
  # benchmark dependencies: it must configure and install.
  set(no_test_deps)
  foreach(pkg Catch2 nlohmann_json CLI11 benchmark)
    list(APPEND no_test_deps -DCMAKE_DISABLE_FIND_PACKAGE_${pkg}=ON)
  endforeach()
  run("configuring dflash with -DCCCL_DIR=${expect_cccl} and no test dependencies"
      ${env} ${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK}/dflash-build -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
      -DCCCL_DIR=${expect_cccl} -DDFLASH_ENABLE_CUDA=OFF ${no_test_deps} ${extra})
  set(BUILD_DIR ${WORK}/dflash-build)
  if(MODE STREQUAL "no_toolkit")
    # The toolkit's own include folder (where cuda_runtime.h is) must be out of reach.
    get_filename_component(toolkit_inc "${inc}" DIRECTORY)
    if(NOT EXISTS ${toolkit_inc}/cuda_runtime.h)
      get_filename_component(toolkit_inc "${cmake_root}/../../include" ABSOLUTE)
    endif()
    file(READ ${BUILD_DIR}/compile_commands.json cc)
    string(FIND "${cc}" "${toolkit_inc} " at1)
    string(FIND "${cc}" "${toolkit_inc}\"" at2)
    if(NOT at1 EQUAL -1 OR NOT at2 EQUAL -1)
      message(FATAL_ERROR "a compile command still names the toolkit's include folder ${toolkit_inc}")
    endif()
    expect_unreachable(cuda_runtime.h)
    run("building the header check without the toolkit"
        ${env} ${CMAKE_COMMAND} --build ${BUILD_DIR} --target dflash_header_warnings)
  endif()
endif()

if(MODE STREQUAL "add_subdirectory")
  list(APPEND consumer_args -DDFLASH_SOURCE_DIR=${SOURCE_DIR})
elseif(MODE STREQUAL "fetch_content")
  # What a release tarball holds, and nothing else: a file the build needs outside it fails here.
  file(MAKE_DIRECTORY ${WORK}/release/dflash)
  foreach(p CMakeLists.txt cmake include LICENSE)
    file(COPY ${SOURCE_DIR}/${p} DESTINATION ${WORK}/release/dflash)
  endforeach()
  run("packing the release tarball" ${CMAKE_COMMAND} -E chdir ${WORK}/release
      ${CMAKE_COMMAND} -E tar czf ${WORK}/dflash.tar.gz dflash)
  list(APPEND consumer_args -DDFLASH_FETCH_URL=${WORK}/dflash.tar.gz)
else()
  run("cmake --install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK}/prefix)
  if(NOT EXISTS ${WORK}/prefix/include/dflash/version.hpp)
    message(FATAL_ERROR "the install has no dflash/version.hpp")
  endif()
  # Only the prefix: the package itself must know where CCCL is.
  list(APPEND consumer_args -DCMAKE_PREFIX_PATH=${WORK}/prefix)
endif()

run("configuring the consumer" ${env} ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build -G Ninja ${consumer_args})
message(STATUS "${out}")
if(expect_cccl AND NOT MODE MATCHES "^(add_subdirectory|fetch_content)$")
  get_filename_component(expect_cccl "${expect_cccl}" ABSOLUTE)
  if(NOT out MATCHES "consumer: CCCL_DIR=([^\n]*)")
    message(FATAL_ERROR "the consumer did not report CCCL_DIR")
  endif()
  get_filename_component(got "${CMAKE_MATCH_1}" ABSOLUTE)
  if(NOT got STREQUAL expect_cccl)
    message(FATAL_ERROR "the installed dflash found CCCL in '${got}', its build used '${expect_cccl}'")
  endif()
endif()
if(MODE STREQUAL "no_cccl" AND NOT out MATCHES "consumer: CCCL_DIR=\n")
  message(FATAL_ERROR "find_package(dflash) without components looked for CCCL:\n${out}")
endif()
run("building the consumer" ${env} ${CMAKE_COMMAND} --build ${WORK}/build)
run("running the host-core consumer" ${WORK}/build/consumer_core)
run("running the variants consumer" ${WORK}/build/consumer_variants --rounds 2 --quiet)
if(NOT out MATCHES "4 variants x 2 rounds" OR NOT out MATCHES "AccumulatingProfiler n=2000")
  message(FATAL_ERROR "consumer_variants: no table of 4 variants:\n${out}")
endif()
run("running one policy's variants binary" ${WORK}/build/consumer_variants_accumulating --rounds 1 --quiet)
if(NOT out MATCHES "2 variants x 1 rounds" OR out MATCHES "NullProfiler")
  message(FATAL_ERROR "consumer_variants_accumulating: expected the accumulating policy alone:\n${out}")
endif()
message(STATUS "consumer_core: ${out}")
if(NOT MODE STREQUAL "no_cccl")
  run("running the consumer" ${WORK}/build/consumer)
  message(STATUS "consumer: ${out}")
endif()
if(MPI AND NOT MODE MATCHES "^(no_toolkit|no_cccl)$")
  run("running the MPI consumer" ${WORK}/build/consumer_mpi)
  message(STATUS "${out}")
endif()
if(CUDA_COMPILER)
  # Built is what is checked (no device needed): run it only for its host part.
  run("running the CUDA consumer" ${WORK}/build/consumer_cuda)
endif()
if(MODE STREQUAL "find_package")
  # COMPONENTS core: the core alone; dflash::dflash, and with it CCCL, is not looked for.
  run("configuring a core-only consumer" ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build-core -G Ninja
      -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCONSUMER_CORE_ONLY=ON -DCONSUMER_FULL=OFF)
  if(out MATCHES "consumer: dflash::dflash defined" OR NOT out MATCHES "consumer: CCCL_DIR=\n")
    message(FATAL_ERROR "find_package(dflash COMPONENTS core) loaded dflash::dflash or looked for CCCL:\n${out}")
  endif()
  if(expect_cccl)
    # Installed with CCCL, used where CCCL cannot be found: a configure error that names it and the way out.
    execute_process(COMMAND ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build-nocccl -G Ninja -DCMAKE_CXX_COMPILER=${CXX}
                            -DCMAKE_PREFIX_PATH=${WORK}/prefix -DCMAKE_DISABLE_FIND_PACKAGE_CCCL=ON
                    RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    if(rc EQUAL 0 OR NOT out MATCHES "dflash::dflash needs CCCL 3" OR NOT out MATCHES "COMPONENTS core")
      message(FATAL_ERROR "find_package(dflash) where CCCL is not found: expected a configure error naming CCCL and COMPONENTS core, got (${rc}):\n${out}")
    endif()
  endif()
endif()
if(MODE STREQUAL "no_cccl")
  # The umbrella header through dflash::dflash where dflash found no CCCL: a build error that says why.
  run("configuring a consumer of the umbrella header" ${env} ${CMAKE_COMMAND} -S ${SOURCE} -B ${WORK}/build-full -G Ninja
      ${consumer_args} -DCONSUMER_FULL=ON)
  execute_process(COMMAND ${env} ${CMAKE_COMMAND} --build ${WORK}/build-full --target consumer
                  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(rc EQUAL 0 OR NOT out MATCHES "dflash: this header needs CCCL 3")
    message(FATAL_ERROR "<dflash/dflash.hpp> with dflash::dflash of a dflash without CCCL: expected a build error naming the missing CCCL, got (${rc}):\n${out}")
  endif()
endif()
