# Runs EXE with ARGS ("a|b|c") in the environment ENV ("K=V|K=V") and checks
# the exit code is exactly CODE and stdout+stderr matches REGEX.
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" env "${ENV}")
execute_process(COMMAND "${CMAKE_COMMAND}" -E env ${env} "${EXE}" ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 60)
message("exit ${rc}\nstdout: ${out}\nstderr: ${err}")
if(NOT "${rc}" STREQUAL "${CODE}")
  message(FATAL_ERROR "exit code '${rc}', expected ${CODE}")
endif()
if(NOT "${out}${err}" MATCHES "${REGEX}")
  message(FATAL_ERROR "output does not match '${REGEX}'")
endif()
