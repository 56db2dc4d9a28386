# A misspelt key's first error names the key as text, with g++ and with clang
# (whose fixed_string arguments otherwise print as character codes).
#   cmake -DCXX=<compiler> -DSRC=compile_fail_key.cpp -DINC=<include dir> -P key_first_error.cmake
# "First error": the output up to the first "error:" line and the line after it
# (g++ prints the instantiation above the error and the failed condition below).
execute_process(COMMAND ${CXX} -std=c++20 -fsyntax-only -I${INC} ${SRC} RESULT_VARIABLE rc ERROR_VARIABLE err OUTPUT_QUIET)
if(rc EQUAL 0)
  message(FATAL_ERROR "${CXX}: compiled although the key is misspelt")
endif()
string(FIND "${err}" "error:" at)
string(SUBSTRING "${err}" 0 ${at} before)
string(SUBSTRING "${err}" ${at} -1 rest)
string(REGEX MATCH "^[^\n]*\n?[^\n]*" first "${rest}")
if(NOT first MATCHES "this key is not in the profiler's key_set")
  message(FATAL_ERROR "${CXX}: the first error is not dflash's:\n${first}")
endif()
set(as_text "(\"froward\"|'f', 'r', 'o', 'w', 'a', 'r', 'd')")
if(NOT "${before}${first}" MATCHES "${as_text}")
  message(FATAL_ERROR "${CXX}: the first error does not name the key 'froward' as text:\n${before}${first}")
endif()
message(STATUS "${CXX}: ${first}")
