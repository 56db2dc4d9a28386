# Runs EXE with ARGS ("a|b|c") and checks the exit code is exactly CODE,
# stderr matches REGEX and, when given, stdout matches OUT_REGEX (ctest's
# WILL_FAIL cannot tell exit 2 from a crash).
# The timeout only turns a hang into a failure, so it matches ctest's 120 s:
# under a sanitizer a run of the example can take most of a minute.
string(REPLACE "|" ";" args "${ARGS}")
execute_process(COMMAND "${EXE}" ${args} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 120)
message("stdout: ${out}\nstderr: ${err}")
if(NOT "${rc}" STREQUAL "${CODE}")
  message(FATAL_ERROR "exit code '${rc}', expected ${CODE}")
endif()
if(NOT err MATCHES "${REGEX}")
  message(FATAL_ERROR "stderr does not match '${REGEX}'")
endif()
if(DEFINED OUT_REGEX AND NOT out MATCHES "${OUT_REGEX}")
  message(FATAL_ERROR "stdout does not match '${OUT_REGEX}'")
endif()
