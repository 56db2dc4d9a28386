#pragma once
// What travels between the example's stages: a batch of documents, a device
// slot of target hidden states, and a packed HS-queue entry for the drafter.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <utility>
#include <vector>

#include <dflash/dflash.hpp>  // device_item and device_buffer (the pipeline's device links), the ops

#include "hs_token.hpp"
#include "model.hpp"
#include "step_check.hpp"

namespace dflash_example {

using namespace dflash::literals;  // the stages' profile keys: "name"_key

struct Batch {
  std::int64_t step = 0;
  TokenBatch tokens;  ///< padded [docs, seq] documents
};

/// One slot of the hs_device link: a step's target hidden states, on the device.
template <dflash::DeviceBackend B>
struct HsSlot : dflash::device_item<B> {
  std::int64_t step = 0;                   ///< host fields: set by the producer, read by the consumer's thread
  TokenBatch tokens;
  dflash::device_buffer<float, B> hidden;  ///< [docs, seq, feature] padded, written in stream order

  /// A copy on the consumer's device (--gpus without peer access): the link
  /// calls it on the consumer's stream after waiting for the producer.
  void mirror_from(const HsSlot& src, const dflash::device_stream<B>& s) {
    step = src.step;
    tokens = src.tokens;
    hidden.copy_from(src.hidden, s);
  }
};

/// What crosses the hs_rows link (--hs-link rows): the valid tokens of the
/// target calls, packed, each with its hidden state (a payload of
/// feature_dim() floats, the shape's rows width).
template <dflash::DeviceBackend B>
using HsRows = dflash::device_rows<hs_token, B, float>;

/// The drafter's CSR attention mask from a block-sparse mask that carries its
/// rule: the library's expansion (full tiles whole, partial tiles by the rule,
/// empty tiles never looked at), compressed to the rows the drafter reads.
[[nodiscard]] inline AttentionMask drafter_attention(const dflash::ops::block_sparse_mask& m) {
  const dflash::ops::dense_mask d = dflash::ops::expand_block_mask(m);
  return AttentionMask::from_dense(d.rows, d.cols, d.allowed);
}

/// One HS-queue entry: everything the drafter needs for a step, packed.
struct HsItem {
  std::int64_t step = 0;                ///< the source's step (--hs-link rows: the batch's number)
  bool dropped = false;                 ///< fewer than 2 x block_size loss tokens: skipped
  std::int32_t padding = 0;             ///< --hs-link rows: rows past the batch's tokens (the last, short batch)
  std::vector<float> hidden;            ///< [S, feature]
  std::vector<std::int32_t> tokens;     ///< [S]
  std::vector<std::uint8_t> loss_mask;  ///< [S]
  std::vector<std::int32_t> doc_ids, pos;
  std::vector<std::int32_t> anchors;    ///< [N]
  std::vector<std::uint8_t> keep;       ///< [N]
  dflash::ops::block_sparse_mask mask;  ///< flex-attention style form, with its element rule
  AttentionMask attention;              ///< the drafter's CSR form of the same mask
  std::exception_ptr error;             ///< set when the device postprocess failed for this item
  /// --device cuda: the postprocess results are still in pinned staging; the
  /// consumer's host stage calls this (once) after the pipeline waited for the
  /// item's event: it fills the fields above (or throws for a wrong item).
  std::function<void(HsItem&)> finish_on_host;

  [[nodiscard]] std::int32_t num_tokens() const noexcept { return static_cast<std::int32_t>(tokens.size()); }
  /// Tokens that are real (not padding): what a trained step counts.
  [[nodiscard]] std::int32_t real_tokens() const noexcept { return num_tokens() - padding; }

  /// FNV-1a over every field the postprocess wrote (float bits included):
  /// equal digests = bit-identical postprocess results (--results).
  [[nodiscard]] std::uint64_t digest() const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    auto mix = [&h](const void* p, std::size_t n) {
      const auto* b = static_cast<const unsigned char*>(p);
      for (std::size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
    };
    auto vec = [&mix](const auto& v) { mix(v.data(), v.size() * sizeof(v[0])); };
    mix(&dropped, sizeof dropped);
    mix(&padding, sizeof padding);
    vec(hidden), vec(tokens), vec(loss_mask), vec(doc_ids), vec(pos), vec(anchors), vec(keep);
    vec(mask.kv_num_blocks), vec(mask.kv_indices), vec(mask.full_kv_num_blocks), vec(mask.full_kv_indices);
    return h;
  }
};

/// What the drafter loop leaves behind for main() (one writer: the sink thread).
struct TrainLog {
  std::vector<double> losses;  ///< per trained step
  std::vector<std::pair<std::int64_t, std::uint64_t>> digests;  ///< (step, HsItem::digest()) per item, arrival order
  std::vector<step_check> checks;  ///< per item, arrival order: comparable across backends (step_check.hpp)
  std::int64_t tokens = 0;     ///< packed tokens trained on
  std::int64_t dropped = 0;
  double last_accuracy = 0;
};

}  // namespace dflash_example
