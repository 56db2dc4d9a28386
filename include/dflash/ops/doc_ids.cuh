#pragma once
// GPU document ids: CUB exclusive sum of lengths, scatter of each non-empty
// document's id to its first token, CUB max-scan, then pos = t - offsets[doc].
// Stream-ordered, O(tokens + docs), coalesced; caller-owned temp storage:
//
//   std::size_t bytes = dflash::ops::gpu::doc_ids_temp_bytes(n_docs, n_tokens);
//   cudaMalloc(&temp, bytes);   // once, reuse for every call up to these sizes
//   dflash::ops::gpu::doc_ids(d_lengths, n_docs, d_doc, d_pos, n_tokens, temp, bytes, stream);
//
// Preconditions on device data (not checkable without a sync): lengths >= 0
// and sum(lengths) == n_tokens. Results are identical to ops::doc_ids.

#include <cub/device/device_scan.cuh>
#include <cuda/functional>

#include "dflash/ops/cuda_support.cuh"
#include "dflash/ops/doc_ids.hpp"

namespace dflash::ops::gpu {

namespace detail {
// Kernels are templates so that every TU including this header may instantiate them (no ODR clash).
// 64-bit loop indices: an int32 index + grid stride (up to 2^24) would wrap
// negative for counts near INT32_MAX and index out of bounds.
template <class I>
__global__ void doc_starts_kernel(const I* lengths, const I* offsets, I n_docs, I* markers, I n_tokens) {
  for (std::int64_t d = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; d < n_docs;
       d += std::int64_t{gridDim.x} * blockDim.x)
    if (lengths[d] > 0 && offsets[d] < n_tokens) markers[offsets[d]] = static_cast<I>(d);
}

template <class I>
__global__ void doc_positions_kernel(const I* offsets, const I* doc_id, I* pos, I n_tokens) {
  for (std::int64_t t = blockIdx.x * std::int64_t{blockDim.x} + threadIdx.x; t < n_tokens;
       t += std::int64_t{gridDim.x} * blockDim.x)
    pos[t] = static_cast<I>(t) - offsets[doc_id[t]];
}

/// One layout for the size query and the run.
struct doc_ids_temp {
  std::int32_t* offsets;
  void* cub;
  std::size_t cub_bytes;
  std::size_t total;
};

inline doc_ids_temp carve_doc_ids(void* base, std::int32_t n_docs, std::int32_t n_tokens) {
  std::size_t scan_bytes = 0, max_bytes = 0;
  check(cub::DeviceScan::ExclusiveSum(nullptr, scan_bytes, static_cast<const std::int32_t*>(nullptr),
                                      static_cast<std::int32_t*>(nullptr), n_docs),
        "doc_ids: ExclusiveSum size query");
  check(cub::DeviceScan::InclusiveScan(nullptr, max_bytes, static_cast<const std::int32_t*>(nullptr),
                                       static_cast<std::int32_t*>(nullptr), ::cuda::maximum<std::int32_t>{}, n_tokens),
        "doc_ids: InclusiveScan size query");
  temp_carver c(base);
  doc_ids_temp t{};
  t.offsets = c.take<std::int32_t>(static_cast<std::size_t>(n_docs));
  t.cub_bytes = scan_bytes > max_bytes ? scan_bytes : max_bytes;
  t.cub = c.take_bytes(t.cub_bytes);
  t.total = c.used();
  return t;
}
}  // namespace detail

/// Temp bytes doc_ids needs for these sizes (CUB's size query plus the offsets array).
[[nodiscard]] inline std::size_t doc_ids_temp_bytes(std::int32_t n_docs, std::int32_t n_tokens) {
  ops::detail::require_non_negative(n_docs, "gpu::doc_ids", "n_docs");
  ops::detail::require_non_negative(n_tokens, "gpu::doc_ids", "n_tokens");
  return detail::carve_doc_ids(nullptr, n_docs, n_tokens).total;
}

template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void doc_ids(const std::int32_t* d_lengths, std::int32_t n_docs, std::int32_t* d_doc_id, std::int32_t* d_pos,
             std::int32_t n_tokens, void* d_temp, std::size_t temp_bytes, cudaStream_t stream,
             profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "gpu::doc_ids";
  ops::detail::require_non_negative(n_docs, op, "n_docs");
  ops::detail::require_non_negative(n_tokens, op, "n_tokens");
  ops::detail::require(n_tokens == 0 || n_docs > 0, op, "n_tokens > 0 needs at least one document");
  auto timer = prof->scope("doc_ids"_key);
  if (n_tokens == 0) return;
  const auto need = detail::carve_doc_ids(nullptr, n_docs, n_tokens).total;
  detail::check_temp(d_temp, temp_bytes, need, op);
  auto t = detail::carve_doc_ids(d_temp, n_docs, n_tokens);
  std::size_t cub_bytes = t.cub_bytes;
  dflash::detail::forget_not_ready();  // CUB checks the last error after its launch: a caller's "busy" is not it
  detail::check(cub::DeviceScan::ExclusiveSum(t.cub, cub_bytes, d_lengths, t.offsets, n_docs, stream),
                "doc_ids: ExclusiveSum");
  // pos doubles as the marker array the max-scan reads: no extra buffer.
  detail::check(cudaMemsetAsync(d_pos, 0, static_cast<std::size_t>(n_tokens) * sizeof(std::int32_t), stream),
                "doc_ids: memset");
  constexpr unsigned threads = 256;
  detail::doc_starts_kernel<<<detail::grid_for(n_docs, threads), threads, 0, stream>>>(d_lengths, t.offsets, n_docs,
                                                                                       d_pos, n_tokens);
  detail::check_launch("doc_ids: scatter launch");
  cub_bytes = t.cub_bytes;
  detail::check(cub::DeviceScan::InclusiveScan(t.cub, cub_bytes, d_pos, d_doc_id, ::cuda::maximum<std::int32_t>{},
                                               n_tokens, stream),
                "doc_ids: max-scan");
  detail::doc_positions_kernel<<<detail::grid_for(n_tokens, threads), threads, 0, stream>>>(t.offsets, d_doc_id,
                                                                                            d_pos, n_tokens);
  detail::check_launch("doc_ids: positions launch");
}

}  // namespace dflash::ops::gpu
