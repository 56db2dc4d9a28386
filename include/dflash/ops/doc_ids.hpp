#pragma once
// Document ids for a packed sequence (the `repeat_interleave` fast path).
//
// Given per-document lengths L[0..D), a packed sequence of T = sum(L) tokens
// gets, for every token t,
//   doc_id[t] = d  such that offsets[d] <= t < offsets[d] + L[d]
//   pos[t]    = t - offsets[d]              (restarts at 0 in each document)
// with offsets = exclusive_scan(L). Empty documents own no token.
//
// The algorithm is O(T + D) and coalesced: exclusive scan of the lengths,
// scatter d to doc_id[offsets[d]] for every non-empty document, max-scan of
// doc_id, then pos = t - offsets[doc_id[t]]. doc_ids_thrust() writes it once
// against Thrust: pass thrust::host (or thrust::cpp::par) for the host twin,
// or a CUDA policy in a .cu TU. The stream-ordered, allocation-free GPU path
// (CUB, caller-owned temp storage) is dflash::ops::gpu::doc_ids in doc_ids.cuh.

#include "dflash/detail/require_cccl.hpp"  // first: a clear error without CCCL

#include <cstdint>
#include <span>
#include <vector>

#include <cuda/functional>
#include <thrust/execution_policy.h>
#include <thrust/fill.h>
#include <thrust/iterator/counting_iterator.h>
#include <thrust/scan.h>
#include <thrust/scatter.h>
#include <thrust/transform.h>

#include "dflash/config.hpp"
#include "dflash/ops/doc_layout.hpp"
#include "dflash/ops/keys.hpp"
#include "dflash/ops/validate.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::ops {

namespace detail {
struct is_positive {
  DFLASH_HOST_DEVICE constexpr bool operator()(std::int32_t v) const noexcept { return v > 0; }
};
struct position_in_doc {
  const std::int32_t* offsets;
  DFLASH_HOST_DEVICE constexpr std::int32_t operator()(std::int32_t t, std::int32_t d) const noexcept {
    return t - offsets[d];
  }
};
}  // namespace detail

/// The algorithm against Thrust, for any execution policy. Preconditions (not
/// checked: the data may live on the device): lengths >= 0, n_tokens == sum.
/// `offsets` is scratch of n_docs elements (left holding the exclusive scan).
template <class ExecPolicy>
void doc_ids_thrust(ExecPolicy&& exec, const std::int32_t* lengths, std::int32_t n_docs, std::int32_t* offsets,
                    std::int32_t* doc_id, std::int32_t* pos, std::int32_t n_tokens) {
  if (n_docs <= 0 || n_tokens <= 0) return;
  thrust::exclusive_scan(exec, lengths, lengths + n_docs, offsets);
  thrust::fill_n(exec, doc_id, n_tokens, 0);
  // Distinct targets: only non-empty documents scatter, and they start at distinct offsets.
  thrust::scatter_if(exec, thrust::counting_iterator<std::int32_t>(0), thrust::counting_iterator<std::int32_t>(n_docs),
                     offsets, lengths, doc_id, detail::is_positive{});
  thrust::inclusive_scan(exec, doc_id, doc_id + n_tokens, doc_id, ::cuda::maximum<std::int32_t>{});
  thrust::transform(exec, thrust::counting_iterator<std::int32_t>(0), thrust::counting_iterator<std::int32_t>(n_tokens),
                    doc_id, pos, detail::position_in_doc{offsets});
}

/// Host twin. Checks: lengths >= 0, sum fits int32, doc_id.size() == pos.size() == sum.
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void doc_ids(std::span<const std::int32_t> lengths, std::span<std::int32_t> doc_id, std::span<std::int32_t> pos,
             profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "doc_ids";
  const std::int32_t total = detail::checked_total(lengths, -1, op);
  detail::require_size(doc_id.size(), static_cast<std::size_t>(total), op, "doc_id");
  detail::require_size(pos.size(), static_cast<std::size_t>(total), op, "pos");
  auto timer = prof->scope("doc_ids"_key);
  std::vector<std::int32_t> offsets(lengths.size());
  doc_ids_thrust(thrust::host, lengths.data(), static_cast<std::int32_t>(lengths.size()), offsets.data(),
                 doc_id.data(), pos.data(), total);
}

/// Host twin, allocating the outputs (doc_ids_result, the packed layout: see doc_layout.hpp).
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
[[nodiscard]] doc_ids_result doc_ids(std::span<const std::int32_t> lengths, profiler_ref<P, K> prof = {}) {
  const std::int32_t total = detail::checked_total(lengths, -1, "doc_ids");
  doc_ids_result r{std::vector<std::int32_t>(static_cast<std::size_t>(total)),
                   std::vector<std::int32_t>(static_cast<std::size_t>(total))};
  doc_ids(lengths, std::span<std::int32_t>(r.doc_id), std::span<std::int32_t>(r.pos), prof);
  return r;
}

}  // namespace dflash::ops
