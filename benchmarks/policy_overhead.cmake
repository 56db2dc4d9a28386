# policy_overhead: needs NVTX3 headers (+ dl) from the CUDA toolkit; skipped
# cleanly without them. FindCUDAToolkit works without the CUDA language.
find_package(CUDAToolkit QUIET)
if(TARGET CUDA::nvtx3)
  dflash_add_benchmark(policy_overhead SOURCES policy_overhead.cpp LIBS CUDA::nvtx3)
else()
  message(STATUS "dflash: nvtx3 headers not found — benchmark policy_overhead skipped")
endif()
