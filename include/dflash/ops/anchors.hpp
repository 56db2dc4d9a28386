#pragma once
// Anchor selection for DFlash blocks, per-slot loss weights and the drop rule.
//
// Sequence b (row b of a padded [batch, seq] layout, seq_lens[b] valid tokens)
// has candidate positions p with
//   p + block_size <= seq_lens[b]          (the block p .. p+B-1 fits),
//   loss_mask[p] != 0,                      and
//   doc_ids[p + B - 1] == doc_ids[p]        (if doc ids are given: a block never
//                                            crosses a document boundary, since
//                                            its labels would come from the next document).
// Up to num_anchors candidates are drawn without replacement: each candidate
// gets the key anchor_key(seed, b, p) = 44 bits of a splitmix64 hash of
// (seed, b, p) above 20 bits of p, and the num_anchors smallest keys win
// (a uniformly random subset; keys are unique, so any correct sort agrees).
// Chosen anchors are written in ascending position order; the remaining slots
// hold anchor 0 with keep 0. Host and device (anchors.cuh) share anchor_key
// and is_anchor_candidate, so they produce identical bits for a seed.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dflash/config.hpp"
#include "dflash/ops/doc_layout.hpp"
#include "dflash/ops/keys.hpp"
#include "dflash/ops/validate.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::ops {

struct anchor_params {
  std::int32_t block_size = 16;
  std::int32_t num_anchors = 512;
  std::uint64_t seed = 0;
};

/// Positions must fit the key's 20 low bits.
inline constexpr std::int32_t anchor_max_seq = (1 << 20) - 1;

[[nodiscard]] DFLASH_HOST_DEVICE constexpr std::uint64_t splitmix64(std::uint64_t x) noexcept {
  x += 0x9E37'79B9'7F4A'7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58'476D'1CE4'E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D0'49BB'1331'11EBull;
  return x ^ (x >> 31);
}

/// Sort key of candidate p of sequence b: counter-based, so any thread computes it alone.
[[nodiscard]] DFLASH_HOST_DEVICE constexpr std::uint64_t anchor_key(std::uint64_t seed, std::uint32_t b,
                                                                   std::uint32_t p) noexcept {
  const std::uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ b) ^ p);
  return (h >> 20 << 20) | p;
}

/// Non-candidates sort after every candidate key (p < 2^20 - 1 keeps candidate keys below it).
inline constexpr std::uint64_t anchor_no_key = ~std::uint64_t{0};

/// The candidate rule; `mask` and `docs` point at row b (docs may be null).
/// The fit test is done in 64 bits: `p + block_size` overflows int32 for block sizes near
/// INT32_MAX, and docs[p + block_size - 1] is read only once the block is known to fit the row.
[[nodiscard]] DFLASH_HOST_DEVICE constexpr bool is_anchor_candidate(std::int32_t p, std::int32_t seq_len,
                                                                   std::int32_t block_size,
                                                                   const std::uint8_t* mask,
                                                                   const std::int32_t* docs) noexcept {
  return p >= 0 && static_cast<std::int64_t>(p) + block_size <= seq_len && mask[p] != 0 &&
         (docs == nullptr || docs[p + block_size - 1] == docs[p]);
}

namespace detail {
inline void check_anchor_args(const anchor_params& a, std::int32_t batch, std::int32_t seq, std::string_view op) {
  require(a.block_size > 0, op, "block_size = " + std::to_string(a.block_size) + " must be positive");
  require_non_negative(a.num_anchors, op, "num_anchors");
  require_non_negative(batch, op, "batch");
  require_non_negative(seq, op, "seq");
  require(seq <= anchor_max_seq, op, "seq = " + std::to_string(seq) + " exceeds " + std::to_string(anchor_max_seq));
}
}  // namespace detail

/// Host twin. loss_mask is [batch, seq]; doc_ids is empty (one document per
/// row) or [batch, seq], non-decreasing within each row's valid prefix;
/// seq_lens[b] in [0, seq]; anchors and keep are [batch, num_anchors].
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void select_anchors(const anchor_params& a, std::int32_t batch, std::int32_t seq,
                    std::span<const std::int32_t> seq_lens, std::span<const std::uint8_t> loss_mask,
                    std::span<const std::int32_t> doc_ids, std::span<std::int32_t> anchors,
                    std::span<std::uint8_t> keep, profiler_ref<P, K> prof = {}) {
  using namespace dflash::literals;
  constexpr std::string_view op = "select_anchors";
  detail::check_anchor_args(a, batch, seq, op);
  detail::require_size(seq_lens.size(), static_cast<std::size_t>(batch), op, "seq_lens");
  detail::checked_total(seq_lens, seq, op, "seq_lens");
  const std::size_t cells = static_cast<std::size_t>(batch) * static_cast<std::size_t>(seq);
  detail::require_size(loss_mask.size(), cells, op, "loss_mask");
  detail::require(doc_ids.empty() || doc_ids.size() == cells, op,
                  "doc_ids has " + std::to_string(doc_ids.size()) + " elements, expected 0 or " + std::to_string(cells));
  const std::size_t k = static_cast<std::size_t>(a.num_anchors);
  detail::require_size(anchors.size(), static_cast<std::size_t>(batch) * k, op, "anchors");
  detail::require_size(keep.size(), static_cast<std::size_t>(batch) * k, op, "keep");
  if (!doc_ids.empty())
    for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
      for (std::size_t s = 1; s < static_cast<std::size_t>(seq_lens[b]); ++s)
        if (doc_ids[b * static_cast<std::size_t>(seq) + s] < doc_ids[b * static_cast<std::size_t>(seq) + s - 1])
          detail::fail(op, "doc_ids of row " + std::to_string(b) + " decrease at position " + std::to_string(s));
  auto timer = prof->scope("anchors"_key);
  std::vector<std::uint64_t> cand;  // candidate keys of one row ("keys" would shadow ops::keys)
  for (std::int32_t b = 0; b < batch; ++b) {
    const std::size_t row = static_cast<std::size_t>(b) * static_cast<std::size_t>(seq);
    const std::uint8_t* mask = loss_mask.data() + row;
    const std::int32_t* docs = doc_ids.empty() ? nullptr : doc_ids.data() + row;
    cand.clear();
    for (std::int32_t p = 0; p < seq; ++p)
      if (is_anchor_candidate(p, seq_lens[static_cast<std::size_t>(b)], a.block_size, mask, docs))
        cand.push_back(anchor_key(a.seed, static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(p)));
    const std::size_t n = std::min(k, cand.size());
    std::nth_element(cand.begin(), cand.begin() + static_cast<std::ptrdiff_t>(n), cand.end());
    std::int32_t* out = anchors.data() + static_cast<std::size_t>(b) * k;
    std::uint8_t* kp = keep.data() + static_cast<std::size_t>(b) * k;
    for (std::size_t j = 0; j < n; ++j) out[j] = static_cast<std::int32_t>(cand[j] & 0xF'FFFFu);
    std::sort(out, out + n);
    std::fill(out + n, out + k, 0);
    std::fill(kp, kp + n, std::uint8_t{1});
    std::fill(kp + n, kp + k, std::uint8_t{0});
  }
}

/// One packed context (the layout the mask functions take: ops::doc_ids output): batch 1 with
/// seq = seq_len = docs.size(); loss_mask is [S]; anchors and keep are [num_anchors].
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void select_anchors(const anchor_params& a, const packed_docs& docs, std::span<const std::uint8_t> loss_mask,
                    std::span<std::int32_t> anchors, std::span<std::uint8_t> keep, profiler_ref<P, K> prof = {}) {
  constexpr std::string_view op = "select_anchors";
  detail::require(docs.size() <= static_cast<std::size_t>(anchor_max_seq), op,
                  "the packed context has " + std::to_string(docs.size()) + " tokens, more than " +
                      std::to_string(anchor_max_seq));
  detail::check_packed_docs(docs, -1, op);
  const auto s = static_cast<std::int32_t>(docs.size());
  const std::int32_t seq_lens[1] = {s};
  select_anchors(a, 1, s, std::span<const std::int32_t>(seq_lens), loss_mask, docs.doc_id, anchors, keep, prof);
}

/// A padded batch (pad_doc_ids): batch, seq and seq_lens come with the ids.
template <ProfilerPolicy P = NullProfiler, KeySet K = typename P::keys>
void select_anchors(const anchor_params& a, const padded_doc_ids& docs, std::span<const std::uint8_t> loss_mask,
                    std::span<std::int32_t> anchors, std::span<std::uint8_t> keep, profiler_ref<P, K> prof = {}) {
  select_anchors(a, docs.batch, docs.seq, docs.seq_lens, loss_mask, docs.doc_id, anchors, keep, prof);
}

/// Per-slot loss weights of a block: slot 0 (the anchor itself) 0, slot k >= 1
/// exp(-(k-1)/gamma), or 1 when gamma == 0 (no decay). gamma < 0 is an error.
inline void slot_loss_weights(std::int32_t block_size, float gamma, std::span<float> out) {
  constexpr std::string_view op = "slot_loss_weights";
  detail::require(block_size > 0, op, "block_size = " + std::to_string(block_size) + " must be positive");
  detail::require(gamma >= 0.0f, op, "gamma = " + std::to_string(gamma) + " must be >= 0 (0 = no decay)");
  detail::require_size(out.size(), static_cast<std::size_t>(block_size), op, "out");
  out[0] = 0.0f;
  for (std::int32_t k = 1; k < block_size; ++k)
    out[static_cast<std::size_t>(k)] =
        gamma == 0.0f ? 1.0f : static_cast<float>(std::exp(-static_cast<double>(k - 1) / static_cast<double>(gamma)));
}

[[nodiscard]] inline std::vector<float> slot_loss_weights(std::int32_t block_size, float gamma) {
  std::vector<float> w(block_size > 0 ? static_cast<std::size_t>(block_size) : 0);
  slot_loss_weights(block_size, gamma, std::span<float>(w));
  return w;
}

[[nodiscard]] inline std::int64_t count_loss_tokens(std::span<const std::uint8_t> loss_mask) noexcept {
  return std::count_if(loss_mask.begin(), loss_mask.end(), [](std::uint8_t m) { return m != 0; });
}

/// The drop rule: a sample with fewer than 2 * block_size loss-bearing tokens is dropped.
[[nodiscard]] inline bool should_drop_sample(std::span<const std::uint8_t> loss_mask, std::int32_t block_size) {
  detail::require(block_size > 0, "should_drop_sample",
                  "block_size = " + std::to_string(block_size) + " must be positive");
  return count_loss_tokens(loss_mask) < 2 * static_cast<std::int64_t>(block_size);
}

}  // namespace dflash::ops
