#pragma once
// What a consumer rank of an mpi_link owes its producer ranks, and when it
// goes back (the rule: credit_policy.hpp).
//
// * Backpressure by credits: each producer rank has at most Depth items in
//   flight (sent, not yet taken by a consumer's source stage); a consumer
//   returns credits for the items its source stage took, in batches
//   (credit_policy.hpp: a batch while the stage takes items, what is owed
//   once it holds none of that producer's items and is idle, so a producer
//   never waits long for credits of items already consumed). A consumer
//   so buffers at most Depth items per producer.
// * A credit message is one std::uint64_t, the number of items it returns,
//   on the link's credit tag. Credits are MPI_Isend until the link ends the
//   stream (end_streams()), synchronous after.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "dflash/mpi/credit_policy.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/owned_sends.hpp"

namespace dflash::mpi::detail {

template <ProcessGroup G>
class link_credits {
 public:
  link_credits(link_shared<G>& s, int tag, std::size_t depth)
      : s_(s), tag_(tag), policy_{credit_policy::batch_for(depth), s.consumers.size() == 1} {
    const auto n = static_cast<std::size_t>(s.group.size());
    owed_.assign(n, 0);
    unsync_to_.assign(n, 0);
  }

  // ---- with s_.m held --------------------------------------------------------
  /// The source stage took an item of producer rank r.
  void owe(std::size_t r) { ++owed_[r]; }
  [[nodiscard]] bool owes_any() const {
    return std::any_of(owed_.begin(), owed_.end(), [](std::uint64_t n) { return n > 0; });
  }
  /// Credits for producer r go back now (credit_policy.hpp)? `held`: its
  /// items this rank holds; `ending`: the job stopped or every producer ended.
  [[nodiscard]] bool due(std::size_t r, std::uint64_t held, bool idle, bool ending) const {
    return policy_.due(owed_[r], held, idle, ending);
  }
  /// Takes the credits that go back now (post() sends them), a batch per
  /// producer; held[r]: producer r's items this rank holds. With the group's
  /// MPI lock too.
  void collect(const std::vector<std::uint64_t>& held, bool idle, bool ending) {
    due_.clear();
    for (std::size_t r = 0; r < owed_.size(); ++r)
      if (due(r, held[r], idle, ending)) {
        const std::uint64_t n = std::exchange(owed_[r], 0);
        due_.emplace_back(static_cast<int>(r), n);
        count(r, n);
      }
  }

  // ---- with the group's MPI lock held ------------------------------------------
  /// What collect() took, one message per producer; true if anything was posted or completed.
  bool post(MPI_Comm c) {
    bool busy = false;
    for (auto [r, n] : due_) {
      out_.post_copy(&n, sizeof n, r, tag_, c,
                     s_.streams_closed ? owned_sends::mode::synchronous : owned_sends::mode::unsynchronised);
      if (!s_.streams_closed) unsync_to_[static_cast<std::size_t>(r)] = 1;
      busy = true;
    }
    busy |= out_.complete();
    return busy;
  }
  /// Ends the unsynchronised credit streams: what is still owed goes with the
  /// closing message, synchronous. A message only where credits went (or
  /// some are owed): a producer rank that never made the link (it failed
  /// first) never matches one, and nothing of ours is left unmatched there.
  void end_streams(MPI_Comm c) {
    for (int r : s_.producers) {
      const auto k = static_cast<std::size_t>(r);
      std::uint64_t n = 0;
      {
        std::lock_guard lk(s_.m);
        n = std::exchange(owed_[k], 0);
        count(k, n);
      }
      if (n > 0 || unsync_to_[k]) out_.post_copy(&n, sizeof n, r, tag_, c);
    }
  }
  /// Tests the credit sends; true if any completed.
  bool complete() { return out_.complete(); }
  /// No credit send is in flight.
  [[nodiscard]] bool empty() const noexcept { return out_.empty(); }

 private:
  // With s_.m held: n credits go back to rank r in one message (none: no batch).
  void count(std::size_t r, std::uint64_t n) {
    if (n == 0) return;
    s_.stats.credits_to[r] += n;
    s_.stats.max_credit_batch = std::max(s_.stats.max_credit_batch, n);
    ++s_.stats.credit_messages;
  }

  link_shared<G>& s_;
  const int tag_;
  const credit_policy policy_;
  std::vector<std::uint64_t> owed_;  // per rank, with s_.m: credits for items taken, not yet returned
  // with the group's MPI lock held only
  std::vector<char> unsync_to_;  // per rank: an MPI_Isend went there (end_streams())
  owned_sends out_;              // credits, and the messages that end their streams
  std::vector<std::pair<int, std::uint64_t>> due_;  // collect()'s batches, kept to allocate nothing per pass
};

}  // namespace dflash::mpi::detail
