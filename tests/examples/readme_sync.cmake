# The README's "choose your profiler" sample must be examples/minimal.cpp verbatim.
file(READ ${README} readme)
file(READ ${SAMPLE} sample)
string(FIND "${readme}" "```cpp\n${sample}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${README} does not contain ${SAMPLE} verbatim in a ```cpp block")
endif()
