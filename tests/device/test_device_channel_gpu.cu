// Kernels of test_device_channel_gpu (the pipeline and the tests are host
// code in test_device_channel_gpu.cpp: nvcc 13 mis-compiles fixed_string key
// types in host code, so only kernels live in .cu files, as in the example).
#include "device_channel_kernels.hpp"

#include <dflash/queue/device_queue.cuh>

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


__global__ void ring_fill_kernel(dflash::device_queue_view<int> q, int x, int* status_out) {
  const int lane = static_cast<int>(threadIdx.x);
  int mine[2];
  const int n = (x + lane) % 3;
  for (int j = 0; j < n; ++j) mine[j] = x * 1000 + lane * 10 + j;
  const dflash::ring_status st = q.warp_try_push(mine, static_cast<unsigned>(n));
  if (lane == 0) *status_out = static_cast<int>(st);
}

__global__ void ring_drain_kernel(dflash::device_queue_view<int> q, long long* out) {
  long long rows = 0, sum = 0;
  for (;;) {
    int v = 0;
    dflash::ring_status st{};
    if (q.warp_try_pop(v, st)) {
      ++rows;
      sum += v;
    }
    if (st != dflash::ring_status::ok) break;  // empty: the producer's work finished before ours
  }
  for (int o = 16; o > 0; o /= 2) {
    rows += __shfl_down_sync(0xffffffffu, rows, o);
    sum += __shfl_down_sync(0xffffffffu, sum, o);
  }
  if (threadIdx.x == 0) {
    out[0] = rows;
    out[1] = sum;
  }
}
}  // namespace

struct ring {
  dflash::device_queue<int> q;
  ring(int capacity, cudaStream_t s) : q(static_cast<std::size_t>(capacity), s) {}
};
ring* make_ring(int capacity, cudaStream_t s) { return new ring(capacity, s); }
void destroy_ring(ring* r) { delete r; }
void launch_ring_fill(ring* r, int x, int* status_out, cudaStream_t s) {
  ring_fill_kernel<<<1, 32, 0, s>>>(r->q.view(), x, status_out);
}
void launch_ring_drain(ring* r, long long* out, cudaStream_t s) { ring_drain_kernel<<<1, 32, 0, s>>>(r->q.view(), out); }

void launch_fill(int* d, int x, long long spin_cycles, cudaStream_t s) { fill_kernel<<<1, 256, 0, s>>>(d, x, spin_cycles); }
void launch_check(const int* d, int x, int* ok_out, cudaStream_t s) { check_kernel<<<1, 256, 0, s>>>(d, x, ok_out); }

}  // namespace gpu_test
