// Kernels of test_device_channel_gpu (the pipeline and the tests are host
// code in test_device_channel_gpu.cpp: nvcc 13 mis-compiles fixed_string key
// types in host code, so only kernels live in .cu files, as in the example).
#include "device_channel_kernels.hpp"

namespace gpu_test {
namespace {
__device__ int pattern(int x, int i) { return x * 7919 + i; }

__global__ void fill_kernel(int* d, int x, long long spin_cycles) {
  if (spin_cycles > 0 && threadIdx.x == 0) {
    const long long t0 = clock64();
    while (clock64() - t0 < spin_cycles) {
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x) d[i] = pattern(x, i);
}

__global__ void check_kernel(const int* d, int x, int* ok_out) {
  __shared__ int bad;
  if (threadIdx.x == 0) bad = 0;
  __syncthreads();
  for (int i = threadIdx.x; i < words; i += blockDim.x)
    if (d[i] != pattern(x, i)) atomicAdd(&bad, 1);
  __syncthreads();
  if (threadIdx.x == 0) *ok_out = bad == 0 ? 1 : 0;
}


}  // namespace

void launch_fill(int* d, int x, long long spin_cycles, cudaStream_t s) { fill_kernel<<<1, 256, 0, s>>>(d, x, spin_cycles); }
void launch_check(const int* d, int x, int* ok_out, cudaStream_t s) { check_kernel<<<1, 256, 0, s>>>(d, x, ok_out); }

}  // namespace gpu_test
