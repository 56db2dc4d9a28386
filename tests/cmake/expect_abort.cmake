# ctest driver: a program that must end by abort() with some output.
#   cmake -DPROGRAM=<exe> -DEXPECT=<regex>... -P expect_abort.cmake
# ctest counts a death by signal as a failure whatever the output says, so the
# program runs here: it must not exit normally, and its stdout + stderr must
# match every EXPECT (a ;-list, each matched on its own).
cmake_minimum_required(VERSION 3.25)
execute_process(COMMAND ${PROGRAM} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
message("${out}")
if(rc MATCHES "^[0-9]+$" AND rc EQUAL 0)
  message(FATAL_ERROR "expect_abort: ${PROGRAM} exited normally; it should have aborted")
endif()
foreach(re IN LISTS EXPECT)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "expect_abort: ${PROGRAM} (result: ${rc}): no match for \"${re}\"")
  endif()
endforeach()
message("expect_abort: ${PROGRAM} ended with \"${rc}\" and printed everything expected")
