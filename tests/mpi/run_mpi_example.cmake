# Runs the example as an MPI job: MPIEXEC -np NP EXE ARGS ("a|b|c"); the exit
# code must be 0 and stdout must match every regex in OUT_REGEX ("r1|r2", ';'-free).
string(REPLACE "|" ";" args "${ARGS}")
string(REPLACE "|" ";" regexes "${OUT_REGEX}")
execute_process(COMMAND "${MPIEXEC}" --oversubscribe --allow-run-as-root -np ${NP} "${EXE}" ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err TIMEOUT 100)
message("stdout: ${out}\nstderr: ${err}")
if(NOT "${rc}" STREQUAL "0")
  message(FATAL_ERROR "exit code '${rc}', expected 0")
endif()
foreach(re IN LISTS regexes)
  if(NOT out MATCHES "${re}")
    message(FATAL_ERROR "stdout does not match '${re}'")
  endif()
endforeach()
