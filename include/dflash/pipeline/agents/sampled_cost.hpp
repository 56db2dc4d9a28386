#pragma once
// sampled_cost: whether a stage's call is cheap enough to run on another
// stage's thread (help-first, stage_seats.hpp; source pull, source_pull.hpp).
// A thread that runs a slow call inline stops doing its own work for that
// long, so only calls sampled below `cheap_ns` move — about what handing the
// item to a parked thread costs (a futex wake and two context switches, ~1-5
// us on the machines measured in docs/bench/pipeline.md).

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>

#include "dflash/detail/std_chrono.hpp"

namespace dflash::detail {

class sampled_cost {
 public:
  /// A call that moves must have sampled below this.
  static constexpr std::int64_t cheap_ns = 1000;
  /// One call in `sample_every` is timed (two clock reads) by whoever counts them.
  static constexpr std::uint32_t sample_every = 8;

  /// The smaller of the two latest samples is below cheap_ns: one call
  /// stretched by preemption does not stop the move.
  [[nodiscard]] bool cheap() const noexcept {
    return std::min(ns_[0].load(std::memory_order_relaxed), ns_[1].load(std::memory_order_relaxed)) < cheap_ns;
  }
  void sampled(std::chrono::nanoseconds d) noexcept {
    ns_[next_.fetch_add(1, std::memory_order_relaxed) & 1].store(d.count(), std::memory_order_relaxed);
  }

 private:
  // The two latest samples (relaxed: a heuristic; a lost update only delays a switch by a sample).
  // Both "unknown" at first: a call moves only once the stage's own threads
  // have sampled a cheap one (a first call that blocks, e.g. on a barrier with
  // the stage's other calls, never runs on another stage's thread).
  static constexpr std::int64_t unknown = std::numeric_limits<std::int64_t>::max();
  std::atomic<std::int64_t> ns_[2]{unknown, unknown};
  std::atomic<unsigned> next_{0};
};

}  // namespace dflash::detail
