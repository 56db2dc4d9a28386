#pragma once
// GPU builder of the block-sparse drafter mask (see block_mask.hpp): one CUDA
// block per query tile; threads classify kv tiles with the same
// classify_tile() as the host builder and compact them in ascending order
// with a cub::BlockScan, so the output is bit-identical to
// ops::build_block_mask. No temp storage.
//
// Preconditions on device data: d_pos is the context's position-within-
// document (the packed layout's pos: ops::doc_ids / packed_docs::pos), valid
// anchors lie in [0, context_len).
//
// To use the result on the host as a block_sparse_mask: build into
// block_sparse_mask::allocate(p, t)'s layout, copy the four arrays back, then
// mask.bind_rule(anchors, keep, pos) so mod() / expand_block_mask work.

#include <cub/block/block_scan.cuh>

#include "dflash/ops/block_mask.hpp"
#include "dflash/ops/cuda_support.cuh"

namespace dflash::ops::gpu {

namespace detail {
inline constexpr int mask_threads = 256;

template <int Threads>
__global__ void __launch_bounds__(Threads)
    block_mask_kernel(block_mask_params p, tile_shape t, std::int32_t nkt, const std::int32_t* __restrict__ anchors,
                      const std::uint8_t* __restrict__ keep, const std::int32_t* __restrict__ pos,
                      block_sparse_view out) {
  using scan = cub::BlockScan<int, Threads>;
  __shared__ typename scan::TempStorage tmp;
  const std::int32_t qt = static_cast<std::int32_t>(blockIdx.x);
  std::int32_t* part = out.kv_indices + static_cast<std::size_t>(qt) * nkt;
  std::int32_t* full = out.full_kv_indices + static_cast<std::size_t>(qt) * nkt;
  std::int32_t np = 0, nf = 0;
  for (std::int64_t base = 0; base < nkt; base += Threads) {  // 64-bit: base + Threads may pass INT32_MAX
    const std::int64_t kt64 = base + threadIdx.x;
    const std::int32_t kt = kt64 < nkt ? static_cast<std::int32_t>(kt64) : nkt;
    const tile_kind k = kt < nkt ? classify_tile(p, t, qt, kt, anchors, keep, pos) : tile_kind::empty;
    // Both counts in one scan: partial in the low 16 bits, full in the high (a chunk has <= 256 of each).
    const int flag = (k == tile_kind::partial ? 1 : 0) | (k == tile_kind::full ? 1 << 16 : 0);
    int rank = 0, agg = 0;
    scan(tmp).ExclusiveSum(flag, rank, agg);
    if (k == tile_kind::partial) part[np + (rank & 0xFFFF)] = kt;
    if (k == tile_kind::full) full[nf + (rank >> 16)] = kt;
    np += agg & 0xFFFF;
    nf += agg >> 16;
    __syncthreads();  // tmp is reused by the next chunk's scan
  }
  for (std::int64_t j = np + static_cast<std::int64_t>(threadIdx.x); j < nkt; j += Threads) part[j] = 0;
  for (std::int64_t j = nf + static_cast<std::int64_t>(threadIdx.x); j < nkt; j += Threads) full[j] = 0;
  if (threadIdx.x == 0) {
    out.kv_num_blocks[qt] = np;
    out.full_kv_num_blocks[qt] = nf;
  }
}
}  // namespace detail

/// Builds the block-sparse mask into device arrays laid out as block_sparse_view
/// (num_q_tiles = tiles_for(N*B, tile.q), num_kv_tiles = tiles_for(S+N*B, tile.kv)).
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void build_block_mask(const block_mask_params& p, tile_shape t, const std::int32_t* d_pos,
                      const std::int32_t* d_anchors, const std::uint8_t* d_keep, block_sparse_view d_out,
                      cudaStream_t stream, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "gpu::build_block_mask";
  ops::detail::check_mask_params(p, op);
  ops::detail::require(t.q > 0 && t.kv > 0, op,
                       "tile sizes must be positive (got " + std::to_string(t.q) + " x " + std::to_string(t.kv) + ")");
  auto timer = prof->scope("block_mask"_key);
  const std::int32_t nqt = tiles_for(p.num_queries(), t.q), nkt = tiles_for(p.num_kv(), t.kv);
  if (nqt == 0) return;
  detail::block_mask_kernel<detail::mask_threads>
      <<<static_cast<unsigned>(nqt), detail::mask_threads, 0, stream>>>(p, t, nkt, d_anchors, d_keep, d_pos, d_out);
  detail::check_launch("build_block_mask launch");
}

}  // namespace dflash::ops::gpu
