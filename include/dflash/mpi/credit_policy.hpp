#pragma once
// When a consumer rank of an mpi_link returns credits to a producer rank.
//
// Each credit message costs both ranks more than an item of a few bytes does,
// so credits go back in batches; but a producer blocked for credits must get
// them while the consumer still takes items, or it waits for nothing.
//
// * A batch, half a window, goes back at once: the producer refills one half
//   while the consumer works on the other. (A whole window per message saves
//   a message per window but stops the producer once per window: measured
//   with 64-byte items in bench_mpi_link: +3 to +8 % at depth 8, about -45 %
//   at depth 64.)
// * Fewer than a batch go back only for a producer none of whose items this
//   rank holds, and then
//   - from a pass of the job's progress thread (it runs while no stage
//     here drives the link, within its nap, at most 10 ms): a producer does
//     not wait long for credits of items already consumed, and a link
//     settles;
//   - at once when the producer has several consumers: its blocked window
//     may be spread so that no consumer ever owes a batch.
//   With one consumer a stage that is taking items holds them back: a
//   producer blocked for credits has a window of items here or on their way,
//   so a batch comes due as the stage takes them.
// * Everything owed goes back once the job stopped or every producer ended.

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dflash::mpi {

struct credit_policy {
  std::uint64_t batch = 1;      ///< credits per message while a stage takes items
  bool single_consumer = true;  ///< every item of the link goes to this rank

  /// The batch for a window of `depth` items.
  static constexpr std::uint64_t batch_for(std::size_t depth) noexcept {
    return std::max<std::uint64_t>(depth / 2, 1);
  }

  /// Credits owed to a producer go back now? `held`: its items this rank
  /// holds (arrived, not yet taken); `idle`: no stage here is taking items;
  /// `ending`: the job stopped or every producer ended.
  [[nodiscard]] constexpr bool due(std::uint64_t owed, std::uint64_t held, bool idle, bool ending) const noexcept {
    if (owed == 0) return false;
    if (owed >= batch || ending) return true;
    return held == 0 && (idle || !single_consumer);
  }
};

}  // namespace dflash::mpi
