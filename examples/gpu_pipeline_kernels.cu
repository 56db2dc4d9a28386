// Kernels of the guide's GPU pipeline (gpu_pipeline.cpp) for dflash::cuda_backend.
#include "gpu_pipeline_kernels.hpp"

#include <cub/block/block_reduce.cuh>

#include <dflash/device/cuda_check.hpp>

namespace {
constexpr int threads = 256;

__global__ void fill_kernel(float* x, long long n, float v) {
  for (long long i = blockIdx.x * 1ll * blockDim.x + threadIdx.x; i < n; i += 1ll * gridDim.x * blockDim.x) x[i] = v;
}

// One block: each thread sums a strided part, cub::BlockReduce adds the parts.
__global__ void __launch_bounds__(threads) sum_kernel(const float* x, long long n, float* out) {
  using reduce = cub::BlockReduce<float, threads>;
  __shared__ typename reduce::TempStorage tmp;
  float part = 0;
  for (long long i = threadIdx.x; i < n; i += threads) part += x[i];
  const float total = reduce(tmp).Sum(part);
  if (threadIdx.x == 0) *out = total;
}
}  // namespace

void launch_fill(float* x, int n, float v, cudaStream_t s) {
  const long long blocks = n <= 0 ? 1 : (n + threads - 1ll) / threads;  // never a zero-size grid
  fill_kernel<<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), threads, 0, s>>>(x, n, v);
  dflash::cuda_check_launch("gpu_pipeline: fill launch");
}

void launch_sum(const float* x, int n, float* out, cudaStream_t s) {
  sum_kernel<<<1, threads, 0, s>>>(x, n, out);
  dflash::cuda_check_launch("gpu_pipeline: sum launch");
}
