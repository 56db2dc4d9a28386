#pragma once
// Pushes of rows into a device_queue_link aggregated over a warp or a block:
// one reservation (a CAS through device_queue_view's cub::WarpScan /
// cub::BlockScan offsets) and one count (cub::WarpReduce / cub::BlockReduce)
// per group; and warp_put, one warp writing a row with a payload. CUDA only;
// include it in any .cu file whose kernels push rows.

#include <cub/block/block_reduce.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <cstdint>

#include "dflash/device/device_rows.hpp"
#include "dflash/queue/device_queue.cuh"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

namespace detail {
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
  const ring_status st = detail::queue_of(p).warp_try_push(rows, n);  // the same status on every lane
  if (lane == 0 && st != ring_status::ok) p.fail();
  return st;
}

/// Every thread of a block of BlockThreads calls this with its own n rows;
/// one reservation for the block. Counts the block's rows once (thread 0).
template <int BlockThreads, class Row>
__device__ ring_status block_push(const row_pusher<Row>& p, const Row* rows, std::uint32_t n) {
  using reduce = cub::BlockReduce<unsigned long long, BlockThreads>;
  __shared__ typename reduce::TempStorage tmp;
  const unsigned long long total = reduce(tmp).Sum(n);
  const bool first = threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0;
  if (first) p.count(total);
  const ring_status st = detail::queue_of(p).template block_try_push<BlockThreads>(rows, n);  // the same on every thread
  if (first && st != ring_status::ok) p.fail();
  return st;
}

/// Row i of a reservation t (row_pusher::reserve), written by a whole warp:
/// lane 0 its Row, every lane a share of its payload (width Elems from src),
/// then lane 0 publishes it. Each lane fences its writes before the warp's
/// barrier, so the consumer that sees the row published sees all of them
/// (the CUDA guide's __threadfence-then-flag pattern). Every lane of a full
/// warp calls it with the same t, i, r and src.
template <class Row, class Elem>
__device__ void warp_put(const row_pusher<Row, Elem>& p, const ring_ticket& t, std::uint32_t i, const Row& r,
                         const Elem* src) {
  const unsigned tid = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned lane = tid % 32;
  Elem* dst = p.payload(t, i);
  for (std::uint32_t k = lane; k < p.width; k += 32) dst[k] = src[k];
  if (lane == 0) p.row(t, i) = r;
  __threadfence();
  __syncwarp();
  if (lane == 0) p.publish(t, i);
}

}  // namespace dflash
