// dflash_gpu_probe: the first step of the GPU bundle's run.sh, and the clean
// control that tells a compute-sanitizer tool that does not work on this
// runtime ("UNSUPPORTED") from one that finds a bug in a test ("FAIL").
// Prints the runtime, the driver and every device; then runs one small kernel
// that uses shared memory and __syncthreads on initialised memory, and checks
// its result. Exit 0: a usable device ran the kernel right. Exit 1: no CUDA
// device (always a failure here: this program exists to say whether there is
// one) or anything else went wrong. The device rule is gpu_probe.hpp's.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <vector>

#include "gpu_probe.hpp"

namespace {
constexpr int block = 256, blocks = 64;

// Each block reverses its slice through shared memory: a race, a missing
// barrier or an uninitialised read would show under the sanitizers.
__global__ void reverse_in_blocks(const int* in, int* out) {
  __shared__ int tile[block];
  const int i = blockIdx.x * block + threadIdx.x;
  tile[threadIdx.x] = in[i];
  __syncthreads();
  out[i] = tile[block - 1 - threadIdx.x];
}

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("FAIL: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}
}  // namespace

int main() {
  int runtime = 0, driver = 0, n = 0;
  cudaRuntimeGetVersion(&runtime);
  const cudaError_t err = cudaGetDeviceCount(&n);
  cudaDriverGetVersion(&driver);
  std::printf("cuda runtime %d, driver supports %d\n", runtime, driver);
  switch (dflash_test::classify(err, n, driver)) {
    case dflash_test::gpu_state::usable: break;
    case dflash_test::gpu_state::no_device:
      std::printf("FAIL: no CUDA device (%s)\n", err == cudaSuccess ? "0 devices" : cudaGetErrorString(err));
      return 1;
    case dflash_test::gpu_state::broken:
      std::printf("FAIL: CUDA initialisation failed (%s: %s): a driver is present but unusable\n",
                  cudaGetErrorName(err), cudaGetErrorString(err));
      return 1;
  }
  for (int d = 0; d < n; ++d) {
    cudaDeviceProp p{};
    if (!ok(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties")) return 1;
    std::printf("device %d: %s, sm_%d%d, %d SMs, %.1f GiB\n", d, p.name, p.major, p.minor, p.multiProcessorCount,
                static_cast<double>(p.totalGlobalMem) / (1u << 30));
  }
  const int count = block * blocks;
  std::vector<int> h(count), back(count, -1);
  for (int i = 0; i < count; ++i) h[static_cast<std::size_t>(i)] = i * 7 + 3;
  int *in = nullptr, *out = nullptr;
  if (!ok(cudaMalloc(&in, count * sizeof(int)), "cudaMalloc") || !ok(cudaMalloc(&out, count * sizeof(int)), "cudaMalloc"))
    return 1;
  bool good = ok(cudaMemcpy(in, h.data(), count * sizeof(int), cudaMemcpyHostToDevice), "cudaMemcpy H2D");
  reverse_in_blocks<<<blocks, block>>>(in, out);
  good = good && ok(cudaGetLastError(), "kernel launch") && ok(cudaDeviceSynchronize(), "kernel");
  good = good && ok(cudaMemcpy(back.data(), out, count * sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
  cudaFree(in);
  cudaFree(out);
  if (!good) return 1;
  for (int i = 0; i < count; ++i) {
    const int b = i / block, t = i % block;
    if (back[static_cast<std::size_t>(i)] != h[static_cast<std::size_t>(b * block + block - 1 - t)]) {
      std::printf("FAIL: kernel result wrong at %d\n", i);
      return 1;
    }
  }
  std::printf("kernel ok: %d blocks x %d threads\n", blocks, block);
  return 0;
}
