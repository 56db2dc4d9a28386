#pragma once
// The --device cuda postprocess: doc ids, packing, anchors and the block mask
// run on the GPU (dflash::ops::gpu, in device_postprocess.cu), on the
// postprocess stage's stream, and the results are copied into pinned host
// memory asynchronously; a host function on the same stream then fills the
// HS item and runs `then`. Nothing here waits for the device: the pipeline
// makes the drafter wait for the item. The interface does not depend on the
// profiler policy or on CUDA headers, so ONE .cu TU serves every variant.
// Builds without CUDA link device_postprocess_none.cpp, whose probe() says so.

#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dflash/ops/anchors.hpp>
#include <dflash/ops/block_mask.hpp>

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

/// Host destinations, sized by the caller, written when the stream reaches
/// the host function: hidden [tokens*feature], doc_ids/pos [tokens],
/// anchors/keep [num_anchors], mask arrays as block_sparse_mask lays them out.
/// They must stay valid (and unmoved) until then.
struct device_output {
  std::span<float> hidden;
  std::span<std::int32_t> doc_ids, pos, anchors;
  std::span<std::uint8_t> keep;
  dflash::ops::block_sparse_view mask;
};

class device_postprocessor {
 public:
  /// Empty when a CUDA device is usable, else why not (no CUDA build, no device, driver error).
  [[nodiscard]] static std::string probe();

  device_postprocessor();  ///< throws std::runtime_error when probe() is not empty
  ~device_postprocessor();
  device_postprocessor(const device_postprocessor&) = delete;
  device_postprocessor& operator=(const device_postprocessor&) = delete;

  /// Enqueues the step on `stream` (a cudaStream_t) and returns at once.
  /// `then(error)` runs on a CUDA host-function thread once `out` is filled
  /// (error null), or with what went wrong for this item (e.g. a token count
  /// other than job.tokens after packing), so the item itself carries the
  /// failure to whoever waits for it. It must not call CUDA. Calls for one
  /// stream come from one thread at a time (the postprocess stage's worker
  /// owns its stream). A throw from `then` is rethrown by the next enqueue()
  /// or by rethrow_pending().
  void enqueue(const device_job& job, const device_output& out, std::function<void(std::exception_ptr)> then,
               void* stream);

  /// Rethrows a failure of a host function no later enqueue() reported
  /// (call once the pipeline has joined: its streams are idle then).
  void rethrow_pending();

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dflash_example
