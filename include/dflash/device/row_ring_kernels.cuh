#pragma once
// The CUDA side of dflash::device_queue_link: the row ring's four operations
// (row_ring_ops.hpp) as kernels, and pushes aggregated over a warp or a block
// (cub::WarpScan / cub::BlockScan through device_queue_view, one atomic per
// group). CUDA only.
//
// The four launchers are ordinary (not inline) functions, so that a host TU
// can build a pipeline with a device_queue_link on cuda_backend: include this
// file in exactly ONE .cu file of the program (a second one would define them
// twice; a missing one is a link error naming dflash::row_ring_kernels).
// The aggregated pushes are templates: include this file wherever a kernel uses them.

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/device/device_rows.hpp"
#include "dflash/device/row_ring_ops.hpp"
#include "dflash/queue/device_queue.cuh"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

namespace detail {
template <class = void>
__global__ void row_ring_pop_kernel(ring_control ctl, std::uint32_t n, ring_ticket* ticket) {
  *ticket = ctl.try_reserve_pop(n);
}
template <class = void>
__global__ void row_ring_release_kernel(ring_control ctl, const ring_ticket* ticket) {
  const ring_ticket t = *ticket;
  for (std::uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < t.count; i += gridDim.x * blockDim.x)
    ctl.release(t.first + i);
}
template <class Row>
__device__ device_queue_view<Row> queue_of(const row_pusher<Row>& p) {
  return {p.ctl, p.data};
}
}  // namespace detail

/// Every lane of a full warp calls this with its own n rows (n may be 0); one
/// reservation for the warp. Counts the warp's rows once (lane 0).
template <class Row>
__device__ ring_status warp_push(const row_pusher<Row>& p, const Row* rows, std::uint32_t n) {
  using reduce = cub::WarpReduce<unsigned long long>;
  __shared__ typename reduce::TempStorage tmp[32];  // one per warp of a <= 1024-thread block
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid % 32, warp = tid / 32;
  const unsigned long long total = reduce(tmp[warp]).Sum(n);
  if (lane == 0) p.count(total);
  return detail::queue_of(p).warp_try_push(rows, n);
}

/// Every thread of a block of BlockThreads calls this with its own n rows;
/// one reservation for the block. Counts the block's rows once (thread 0).
template <int BlockThreads, class Row>
__device__ ring_status block_push(const row_pusher<Row>& p, const Row* rows, std::uint32_t n) {
  using reduce = cub::BlockReduce<unsigned long long, BlockThreads>;
  __shared__ typename reduce::TempStorage tmp;
  const unsigned long long total = reduce(tmp).Sum(n);
  if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) p.count(total);
  return detail::queue_of(p).template block_try_push<BlockThreads>(rows, n);
}

void row_ring_kernels::init(ring_control ctl, void* stream) {
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>((ctl.capacity() + 255) / 256, 1024));
  detail::ring_init_kernel<><<<blocks, 256, 0, s>>>(ctl);
  detail::cuda_check_launch("dflash::device_queue_link: ring init launch");
}
void row_ring_kernels::zero(unsigned long long* counter, void* stream) {
  detail::cuda_check(cudaMemsetAsync(counter, 0, sizeof *counter, static_cast<cudaStream_t>(stream)),
                     "dflash::device_queue_link: cudaMemsetAsync(pushed-row counter)");
}
void row_ring_kernels::pop(ring_control ctl, std::uint32_t n, ring_ticket* ticket, void* stream) {
  detail::row_ring_pop_kernel<><<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ctl, n, ticket);
  detail::cuda_check_launch("dflash::device_queue_link: pop launch");
}
void row_ring_kernels::release(ring_control ctl, const ring_ticket* ticket, void* stream) {
  detail::row_ring_release_kernel<><<<4, 256, 0, static_cast<cudaStream_t>(stream)>>>(ctl, ticket);
  detail::cuda_check_launch("dflash::device_queue_link: release launch");
}

}  // namespace dflash
