#pragma once
// One row of the hs_rows link (--hs-link rows): a valid token of a target
// call, with its hidden state as the row's payload (feature_dim() floats).
// Plain data, so the host stages, the CUDA kernels and the host twin's
// enqueued work share it.

#include <cstdint>

namespace dflash_example {

struct hs_token {
  std::int64_t doc;    ///< a document id unique in the run (hs_doc_id): rows of one document are contiguous
  std::int32_t token;  ///< its token id
  std::int32_t loss;   ///< its loss mask (0 or 1)
};

/// The run-wide id of document d of step `step` (a step packs far fewer than 2^20 documents).
[[nodiscard]] constexpr std::int64_t hs_doc_id(std::int64_t step, std::int32_t d) noexcept { return step * (1 << 20) + d; }

}  // namespace dflash_example
