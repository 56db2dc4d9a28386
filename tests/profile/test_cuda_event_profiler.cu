// Kernels for test_cuda_event_profiler_gpu.cpp. Kept free of dflash headers:
// nvcc 13's front end cannot match partial specialisations on class-type
// template arguments (dflash::key_set<"...">), so the profiler is exercised
// from a g++ TU — which is also how host code uses CudaEventProfiler.
#include <cuda_runtime.h>

#include <cstdint>

namespace {
__device__ std::uint64_t global_ns() {
  std::uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void spin_for(std::uint64_t ns) {
  const std::uint64_t t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}
}  // namespace

/// Enqueues one thread that spins for at least `ns` of GPU global-timer time.
cudaError_t dflash_test_spin(cudaStream_t s, std::uint64_t ns) {
  spin_for<<<1, 1, 0, s>>>(ns);
  return cudaGetLastError();
}
