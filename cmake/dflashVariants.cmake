# dflash_add_variants(<name> SOURCES <src>... [POLICIES <label>...] [LIBS <lib>...])
#
# Benchmark variants of one workload (dflash/bench/variants.hpp): builds
#   <name>          the comparison binary: every variant in one process, side by
#                   side (its main calls dflash::bench::run_main);
#   <name>_<label>  for each POLICIES label, one binary with only that policy
#                   compiled in: the k-th label is the k-th entry of the
#                   program's dflash::bench::policies<...> (DFLASH_BENCH_POLICY_INDEX=k),
#                   for deployment or an external profiler.
# Each links dflash::core (and LIBS: dflash::dflash for code that needs CCCL).
function(dflash_add_variants name)
  cmake_parse_arguments(PARSE_ARGV 1 ARG "" "" "SOURCES;POLICIES;LIBS")
  if(NOT ARG_SOURCES)
    message(FATAL_ERROR "dflash_add_variants(${name}): SOURCES is required (the program whose main calls dflash::bench::run_main)")
  endif()
  if(ARG_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "dflash_add_variants(${name}): unknown arguments ${ARG_UNPARSED_ARGUMENTS} (SOURCES, POLICIES, LIBS)")
  endif()
  if(NOT TARGET dflash::core)
    message(FATAL_ERROR "dflash_add_variants(${name}): dflash::core is not defined (find_package(dflash) or add_subdirectory(dflash) first)")
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_link_libraries(${name} PRIVATE dflash::core ${ARG_LIBS})
  set(_k 0)
  foreach(_label IN LISTS ARG_POLICIES)
    if(NOT _label MATCHES "^[A-Za-z0-9_]+$")
      message(FATAL_ERROR "dflash_add_variants(${name}): POLICIES label '${_label}' must be letters, digits and '_' (it names a target)")
    endif()
    add_executable(${name}_${_label} ${ARG_SOURCES})
    target_link_libraries(${name}_${_label} PRIVATE dflash::core ${ARG_LIBS})
    target_compile_definitions(${name}_${_label} PRIVATE DFLASH_BENCH_POLICY_INDEX=${_k})
    math(EXPR _k "${_k} + 1")
  endforeach()
endfunction()
