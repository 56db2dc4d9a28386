#pragma once
// GPU anchor selection, bit-identical to ops::select_anchors:
//   1. every (row, position) gets anchor_key() if it is a candidate, else anchor_no_key;
//   2. cub::DeviceSegmentedRadixSort sorts keys (with positions) per row;
//      keys are unique, so the order is the host's;
//   3. one CUDA block per row marks the first num_anchors candidates and
//      compacts them in position order with a cub::BlockScan.
// Caller-owned temp storage (anchors_temp_bytes). Preconditions on device
// data: seq_lens in [0, seq]; doc ids (optional) non-decreasing per row.

#include <cub/block/block_scan.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <limits>

#include "dflash/ops/anchors.hpp"
#include "dflash/ops/cuda_support.cuh"

namespace dflash::ops::gpu {

namespace detail {
inline constexpr int anchor_threads = 256;

struct anchors_temp {
  std::uint64_t* keys_in;
  std::uint64_t* keys_out;
  std::int32_t* pos_in;
  std::int32_t* pos_out;
  std::int32_t* offsets;
  std::uint8_t* chosen;
  void* cub;
  std::size_t cub_bytes;
  std::size_t total;
};

inline anchors_temp carve_anchors(void* base, std::int32_t batch, std::int32_t seq) {
  const std::size_t cells = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  std::size_t sort_bytes = 0;
  check(cub::DeviceSegmentedRadixSort::SortPairs(
            nullptr, sort_bytes, static_cast<const std::uint64_t*>(nullptr), static_cast<std::uint64_t*>(nullptr),
            static_cast<const std::int32_t*>(nullptr), static_cast<std::int32_t*>(nullptr), static_cast<int>(cells),
            batch, static_cast<const std::int32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr)),
        "anchors: SortPairs size query");
  temp_carver c(base);
  anchors_temp t{};
  t.keys_in = c.take<std::uint64_t>(cells);
  t.keys_out = c.take<std::uint64_t>(cells);
  t.pos_in = c.take<std::int32_t>(cells);
  t.pos_out = c.take<std::int32_t>(cells);
  t.offsets = c.take<std::int32_t>(static_cast<std::size_t>(batch) + 1);
  t.chosen = c.take<std::uint8_t>(cells);
  t.cub_bytes = sort_bytes;
  t.cub = c.take_bytes(sort_bytes);
  t.total = c.used();
  return t;
}

template <class Params>
__global__ void anchor_keys_kernel(Params a, std::int32_t batch, std::int32_t seq,
                                   const std::int32_t* __restrict__ seq_lens, const std::uint8_t* __restrict__ mask,
                                   const std::int32_t* __restrict__ docs, anchors_temp t) {
  const std::int64_t cells = static_cast<std::int64_t>(batch) * seq;
  const std::int64_t items = cells > batch ? cells : batch + 1;  // also covers the batch+1 segment offsets
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < items;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    if (i <= batch) t.offsets[i] = static_cast<std::int32_t>(i) * seq;
    if (i >= cells) continue;
    const std::int32_t b = static_cast<std::int32_t>(i / seq), p = static_cast<std::int32_t>(i % seq);
    const std::size_t row = static_cast<std::size_t>(b) * static_cast<std::size_t>(seq);
    const bool cand = is_anchor_candidate(p, seq_lens[b], a.block_size, mask + row, docs ? docs + row : nullptr);
    t.keys_in[i] = cand ? anchor_key(a.seed, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(p)) : anchor_no_key;
    t.pos_in[i] = p;
    t.chosen[i] = 0;
  }
}

template <int Threads>
__global__ void __launch_bounds__(Threads)
    anchor_pick_kernel(std::int32_t num_anchors, std::int32_t seq, anchors_temp t, std::int32_t* __restrict__ anchors,
                       std::uint8_t* __restrict__ keep) {
  using scan = cub::BlockScan<int, Threads>;
  __shared__ typename scan::TempStorage tmp;
  const std::int32_t b = static_cast<std::int32_t>(blockIdx.x);
  const std::size_t row = static_cast<std::size_t>(b) * static_cast<std::size_t>(seq);
  const std::int32_t take = num_anchors < seq ? num_anchors : seq;
  for (std::int64_t j = threadIdx.x; j < take; j += Threads) {  // 64-bit: j + Threads may pass INT32_MAX
    const std::size_t at = row + static_cast<std::size_t>(j);
    if (t.keys_out[at] != anchor_no_key) t.chosen[row + static_cast<std::size_t>(t.pos_out[at])] = 1;
  }
  __syncthreads();  // marks (global memory) visible to the whole block
  std::int32_t* out = anchors + static_cast<std::size_t>(b) * num_anchors;
  std::uint8_t* kp = keep + static_cast<std::size_t>(b) * num_anchors;
  std::int32_t n = 0;
  for (std::int64_t base = 0; base < seq; base += Threads) {  // 64-bit: base + Threads may pass INT32_MAX
    const std::int64_t p = base + threadIdx.x;
    const int f = p < seq ? t.chosen[row + static_cast<std::size_t>(p)] : 0;
    int rank = 0, agg = 0;
    scan(tmp).ExclusiveSum(f, rank, agg);
    if (f) {
      out[n + rank] = static_cast<std::int32_t>(p);  // p < seq
      kp[n + rank] = 1;
    }
    n += agg;
    __syncthreads();
  }
  for (std::int64_t j = std::int64_t{n} + threadIdx.x; j < num_anchors; j += Threads) {  // 64-bit, as above
    out[j] = 0;
    kp[j] = 0;
  }
}
}  // namespace detail

namespace detail {
/// CUB's segmented sort counts items in int: batch * seq must fit.
inline void check_anchor_cells(std::int32_t batch, std::int32_t seq, std::string_view op) {
  const std::int64_t cells = static_cast<std::int64_t>(batch) * seq;
  if (cells > std::numeric_limits<int>::max())
    ops::detail::fail_overflow(op, "batch * seq = " + std::to_string(cells) + " overflows int");
}
}  // namespace detail

[[nodiscard]] inline std::size_t anchors_temp_bytes(std::int32_t batch, std::int32_t seq) {
  ops::detail::check_anchor_args(anchor_params{}, batch, seq, "gpu::select_anchors");
  detail::check_anchor_cells(batch, seq, "gpu::select_anchors");
  return detail::carve_anchors(nullptr, batch, seq).total;
}

template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void select_anchors(const anchor_params& a, std::int32_t batch, std::int32_t seq, const std::int32_t* d_seq_lens,
                    const std::uint8_t* d_loss_mask, const std::int32_t* d_doc_ids, std::int32_t* d_anchors,
                    std::uint8_t* d_keep, void* d_temp, std::size_t temp_bytes, cudaStream_t stream,
                    profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "gpu::select_anchors";
  ops::detail::check_anchor_args(a, batch, seq, op);
  detail::check_anchor_cells(batch, seq, op);
  const std::int64_t cells = static_cast<std::int64_t>(batch) * seq;
  auto timer = prof->scope("anchors"_key);
  if (batch == 0 || a.num_anchors == 0) return;
  const std::size_t need = detail::carve_anchors(nullptr, batch, seq).total;
  detail::check_temp(d_temp, temp_bytes, need, op);
  const detail::anchors_temp t = detail::carve_anchors(d_temp, batch, seq);
  if (cells > 0) {
    constexpr unsigned threads = 256;
    detail::anchor_keys_kernel<<<detail::grid_for(cells + batch + 1, threads), threads, 0, stream>>>(a, batch, seq, d_seq_lens,
                                                                                         d_loss_mask, d_doc_ids, t);
    detail::check_launch("select_anchors: keys launch");
    std::size_t bytes = t.cub_bytes;
    detail::check(cub::DeviceSegmentedRadixSort::SortPairs(t.cub, bytes, t.keys_in, t.keys_out, t.pos_in, t.pos_out,
                                                           static_cast<int>(cells), batch, t.offsets, t.offsets + 1, 0,
                                                           64, stream),
                  "select_anchors: SortPairs");
  }
  detail::anchor_pick_kernel<detail::anchor_threads>
      <<<static_cast<unsigned>(batch), detail::anchor_threads, 0, stream>>>(a.num_anchors, seq, t, d_anchors, d_keep);
  detail::check_launch("select_anchors: pick launch");
}

}  // namespace dflash::ops::gpu
