// The kernels of test_device_queue_link_gpu.cpp: a data-dependent number of
// rows pushed by two warps (warp_push) or a whole block (block_push), some
// after a spin, and a consumer that tallies its batch with the count read on
// the device. This is the program's one .cu file that includes
// row_ring_kernels.cuh (the ring's own kernels).
#include <dflash/detail/cuda_check.hpp>
#include <dflash/device/device_rows.cuh>
#include <dflash/device/row_ring_kernels.cuh>

#include "device_queue_link_kernels.hpp"

namespace rows_gpu_test {
namespace {
constexpr int threads = 64;  // two warps: each warp_push has its own warp's storage
__global__ void produce_kernel(dflash::row_pusher<row> p, int x, long long spin) {
  const long long t0 = clock64();
  while (clock64() - t0 < spin) {
  }
  const int t = static_cast<int>(threadIdx.x);
  const row r{x, t};
  const std::uint32_t mine = t < rows_of(x) ? 1u : 0u;
  if (x % 2 == 0) (void)dflash::warp_push(p, &r, mine);
  else (void)dflash::block_push<threads>(p, &r, mine);
}
__global__ void consume_kernel(dflash::row_batch<row> b, int* tally, int* bad) {
  for (std::uint32_t i = threadIdx.x; i < b.count(); i += blockDim.x) {
    const row r = b[i];
    if (r.item < 0 || r.item >= items || r.j < 0 || r.j >= rows_of(r.item)) atomicAdd(bad, 1);
    else atomicAdd(&tally[r.item * bound + r.j], 1);
  }
}
}  // namespace
void launch_produce(dflash::row_pusher<row> p, int x, long long spin, cudaStream_t s) {
  produce_kernel<<<1, threads, 0, s>>>(p, x, spin);
  dflash::detail::cuda_check_launch("test_device_queue_link_gpu: producer launch");
}
void launch_consume(dflash::row_batch<row> b, int* tally, int* bad, cudaStream_t s) {
  consume_kernel<<<1, 128, 0, s>>>(b, tally, bad);
  dflash::detail::cuda_check_launch("test_device_queue_link_gpu: consumer launch");
}
}  // namespace rows_gpu_test
