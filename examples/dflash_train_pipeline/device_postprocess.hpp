#pragma once
// The --device cuda postprocess: doc ids, packing, anchors and the block mask
// run on the GPU (dflash::ops::gpu, in device_postprocess.cu) and the results
// are copied back to the host; the target model and the drafter stay on the
// CPU. The interface does not depend on the profiler policy, so ONE .cu TU
// serves every variant: run() reports what it timed and the stage records it.
// Builds without CUDA link device_postprocess_none.cpp, whose probe() says so.

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <dflash/ops/anchors.hpp>
#include <dflash/ops/block_mask.hpp>

namespace dflash_example {

/// One batch, host memory in and out.
struct device_job {
  std::span<const float> padded;              ///< [docs, seq, feature] target hidden states
  std::int32_t docs = 0, seq = 0, feature = 0;
  std::span<const std::int32_t> lengths;      ///< [docs]
  std::span<const std::uint8_t> loss_mask;    ///< [tokens] packed
  std::int32_t tokens = 0;                    ///< sum(lengths)
  dflash::ops::anchor_params anchors;
  dflash::ops::block_mask_params mask;        ///< context_len == tokens
  dflash::ops::tile_shape tile;
};

/// Sized by the caller: hidden [tokens*feature], doc_ids/pos [tokens],
/// anchors/keep [num_anchors], mask arrays as block_sparse_mask lays them out.
struct device_output {
  std::span<float> hidden;
  std::span<std::int32_t> doc_ids, pos, anchors;
  std::span<std::uint8_t> keep;
  dflash::ops::block_sparse_view mask;
  std::int32_t packed_tokens = 0;  ///< cu_seqlens[docs], read back with ops::gpu::cuda_batched_readback
};

/// Host-side times of the phases (enqueue, except `copy`, which waits for
/// the device work and the device -> host copies to finish).
struct device_times {
  std::chrono::nanoseconds upload{}, doc_ids{}, pack{}, anchors{}, mask{}, copy{};
};

class device_postprocessor {
 public:
  /// Empty when a CUDA device is usable, else why not (no CUDA build, no device, driver error).
  [[nodiscard]] static std::string probe();

  device_postprocessor();  ///< throws std::runtime_error when probe() is not empty
  ~device_postprocessor();
  device_postprocessor(const device_postprocessor&) = delete;
  device_postprocessor& operator=(const device_postprocessor&) = delete;

  /// One thread at a time (the postprocess stage has one worker).
  void run(const device_job& job, device_output& out, device_times& times);

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace dflash_example
