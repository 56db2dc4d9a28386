#pragma once
// hs_staging: the pinned host memory the postprocess copies its results into, from one bounded
// dflash::pinned_pool per run. On the host twin it stands for the same memory (the packed hidden
// states go through it on the way to the HS-queue entry), so the tests see the allocation
// pattern the CUDA path has: a few blocks while the pool warms up, none per item after.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/device/pinned_pool.hpp>

#include "options.hpp"

namespace dflash_example {

/// Blocks a run's staging may hold: one for every HS-queue entry and every step in flight
/// before it (the hs_device slots), + the postprocess's, the drafter's and slack.
[[nodiscard]] inline std::size_t staging_blocks(const Options& o) {
  return static_cast<std::size_t>(o.hs_queue_depth) + static_cast<std::size_t>(o.post_link_depth) + 4;
}
/// The same in bytes, for blocks of `block` bytes (rounded up to a power of two).
[[nodiscard]] inline std::size_t staging_bound(const Options& o, std::size_t block) {
  return staging_blocks(o) * dflash::pinned_pool<dflash::host_stream_backend>::size_class(block);
}

/// The pool of a run, made at its first request from the backend given then (on the twin the
/// pipeline's own, whose stats count every pinned allocation), its bound `blocks` of that
/// request. Every request of a run asks for the same size, that of the largest step: blocks are
/// then reused whatever a step's size, and the bound in blocks is exact.
template <dflash::DeviceBackend B>
class hs_staging {
 public:
  explicit hs_staging(std::size_t blocks) : blocks_(blocks) {}
  [[nodiscard]] dflash::pinned_pool<B>& pool(B& backend, std::size_t block_bytes) {
    const std::lock_guard lk(m_);
    if (!pool_)
      pool_ = std::make_unique<dflash::pinned_pool<B>>(backend, blocks_ * dflash::pinned_pool<B>::size_class(block_bytes));
    return *pool_;
  }
  [[nodiscard]] typename dflash::pinned_pool<B>::block take(B& backend, std::size_t block_bytes) {
    return pool(backend, block_bytes).acquire(block_bytes);
  }
  /// Empty before the first use.
  [[nodiscard]] std::optional<dflash::pinned_pool_stats> stats() const {
    const std::lock_guard lk(m_);
    if (!pool_) return std::nullopt;
    return pool_->stats();
  }

 private:
  std::size_t blocks_;
  mutable std::mutex m_;
  std::unique_ptr<dflash::pinned_pool<B>> pool_;
};

/// The run's staging pool, one line (printed after the run).
[[nodiscard]] inline std::string staging_line(const std::optional<dflash::pinned_pool_stats>& st) {
  if (!st) return {};
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "hs staging (pinned pool): %llu blocks allocated, %llu reuses; high water %.1f KiB in use of a "
                "%.1f KiB bound\n",
                static_cast<unsigned long long>(st->allocations), static_cast<unsigned long long>(st->reuses),
                static_cast<double>(st->high_water) / 1024.0, static_cast<double>(st->bound) / 1024.0);
  return buf;
}

}  // namespace dflash_example
