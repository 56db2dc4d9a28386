#pragma once
// The --device cuda postprocess: doc ids, packing, anchors and the block mask
// run on the GPU (dflash::ops::gpu, in device_postprocess.cu), on the
// postprocess stage's stream, and the results are copied into pinned host
// memory asynchronously. enqueue() returns them as a device_result; a host
// stage unpacks it (device_result::unpack) once the pipeline has made it wait
// for the item's event. Nothing here waits for the device, and nothing runs
// in a CUDA host function: CUDA runs those on one thread and the stream
// stalls behind them (and its device time would count their CPU time).
// The interface does not depend on the profiler policy or on CUDA headers,
// so ONE .cu TU serves every variant. Builds without CUDA link
// device_postprocess_none.cpp, whose probe() says so.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <dflash/device/device_rows.hpp>
#include <dflash/device/pinned_pool.hpp>  // pinned_pool_stats (host code)
#include <dflash/ops/anchors.hpp>
#include <dflash/ops/block_mask.hpp>

#include "hs_token.hpp"

namespace dflash_example {

/// One step. Host vectors are copied: the caller may reuse its own at once.
struct device_job {
  const float* padded = nullptr;              ///< DEVICE memory: [docs, seq, feature] (the slot's buffer)
  std::int32_t docs = 0, seq = 0, feature = 0;
  std::vector<std::int32_t> lengths;          ///< [docs]
  std::vector<std::uint8_t> loss_mask;        ///< [tokens] packed
  std::int32_t tokens = 0;                    ///< sum(lengths)
  dflash::ops::anchor_params anchors;
  dflash::ops::block_mask_params mask;        ///< context_len == tokens
  dflash::ops::tile_shape tile;
};

/// One batch of the hs_rows link (--hs-link rows): its rows, on the device,
/// with a count only the device knows; the results have the fixed layout of
/// `seq_len` tokens (the rows, then padding).
struct rows_job {
  dflash::row_batch<hs_token, float> batch;   ///< DEVICE memory: the popped rows and their payloads
  std::int32_t seq_len = 0, feature = 0;      ///< the layout's tokens; the payload's width
  dflash::ops::anchor_params anchors;
  dflash::ops::block_mask_params mask;        ///< context_len == seq_len
  dflash::ops::tile_shape tile;
};

/// Host destinations of device_result::unpack, sized by the caller:
/// hidden [tokens*feature], doc_ids/pos [tokens], anchors/keep [num_anchors],
/// mask arrays as block_sparse_mask lays them out. A rows_job's results also
/// fill tokens and loss_mask [tokens] and *count (the batch's rows).
struct device_output {
  std::span<float> hidden;
  std::span<std::int32_t> doc_ids, pos, anchors;
  std::span<std::uint8_t> keep;
  dflash::ops::block_sparse_view mask;
  std::span<std::int32_t> tokens{};
  std::span<std::uint8_t> loss_mask{};
  std::int32_t* count = nullptr;
};

/// One step's results in pinned host memory (a staging block of the
/// postprocessor's pool). Valid to unpack once the stream has passed the step
/// (the consumer's wait for the item's event). Move-only; destroying it gives
/// the block back to the pool, which reuses it only once the block's last
/// step has completed on the device (so a result dropped early is safe too).
class device_result {
 public:
  device_result() noexcept;  ///< empty
  device_result(device_result&&) noexcept;
  device_result& operator=(device_result&&) noexcept;
  device_result(const device_result&) = delete;
  device_result& operator=(const device_result&) = delete;
  ~device_result();
  [[nodiscard]] explicit operator bool() const noexcept { return s_ != nullptr; }

  /// Copies the results into `out` (sized for the job). Throws
  /// std::runtime_error when packing produced a token count other than the
  /// job's (the item is wrong), std::logic_error when empty or sized wrong.
  void unpack(const device_output& out) const;

  struct state;  ///< device_postprocess.cu

 private:
  friend class device_postprocessor;
  explicit device_result(std::unique_ptr<state> s) noexcept;
  std::unique_ptr<state> s_;
};

class device_postprocessor {
 public:
  /// Empty when a CUDA device is usable, else why not (no CUDA build, no device, driver error).
  [[nodiscard]] static std::string probe();

  /// Throws std::runtime_error when probe() is not empty. Results wait in pinned blocks of a
  /// pool that holds at most `staging_blocks` of them (hs_staging.hpp's staging_blocks: every
  /// step that can be in flight at once); every block is sized for a step of `max_tokens`
  /// packed tokens (--seq-len), so one size serves every step and the bound is exact. A run
  /// uses enqueue or enqueue_rows, not both.
  device_postprocessor(std::size_t staging_blocks, std::int32_t max_tokens);
  ~device_postprocessor();
  device_postprocessor(const device_postprocessor&) = delete;
  device_postprocessor& operator=(const device_postprocessor&) = delete;

  /// Enqueues the step on `stream` (a cudaStream_t) and returns at once with
  /// its results, to unpack after the stream has passed them. Calls for one
  /// stream come from one thread at a time (the postprocess stage's worker
  /// owns its stream).
  [[nodiscard]] device_result enqueue(const device_job& job, void* stream);
  /// The same for a batch of rows: gathered from the ring (the rows' count
  /// read on the device), documents and positions from the rows' document
  /// ids (a CUB scan), anchors among the counted tokens, the block mask.
  [[nodiscard]] device_result enqueue_rows(const rows_job& job, void* stream);
  /// The pinned pool's counts; empty before the first step.
  [[nodiscard]] std::optional<dflash::pinned_pool_stats> staging_stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dflash_example
