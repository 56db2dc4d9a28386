#pragma once
// What the parts of one rank's end of an mpi_link share: link_sender.hpp,
// link_receiver.hpp and link_credits.hpp each own their state and reference
// this; link_core.hpp composes them.

#include <mpi.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "dflash/mpi/process_group.hpp"
#include "dflash/mpi/runtime.hpp"
#include "dflash/mpi/wire.hpp"

namespace dflash::mpi {

/// Counters of one rank's end of a link, for tests and reports.
struct link_stats {
  // consumer side
  std::uint64_t received = 0;              ///< items delivered to this rank's source stage
  std::uint64_t max_buffered_per_producer = 0;  ///< most items of one producer held here at once
  std::vector<std::uint64_t> taken_from;   ///< per rank: its items this rank's source stage took
  std::vector<std::uint64_t> credits_to;   ///< per rank: credits returned to it
  std::uint64_t max_credit_batch = 0;      ///< most credits returned in one message
  std::uint64_t credit_messages = 0;       ///< credit messages sent (credits / this: the mean batch)
  std::uint64_t rejected = 0;              ///< items that did not fit this rank's wire<T> (job failed)
  std::uint64_t receiving = 0;             ///< items whose buffers are still being received (now; 0 after finish())
  // producer side
  std::uint64_t sent = 0;                  ///< items handed to MPI
  std::uint64_t queued = 0;                ///< items handed to send(), not yet posted (now)
  std::uint64_t max_batch = 0;             ///< most items posted in one header message
  std::uint64_t batches = 0;               ///< header messages posted (sent / this: the mean batch)
  std::vector<std::uint64_t> credits_from; ///< per rank: credits it returned
  // both
  std::uint64_t driven = 0;  ///< passes over the link made by a stage thread in send/receive (job::drive)
};

namespace detail {

// Every request done (MPI_Testall).
inline bool test_all(std::vector<MPI_Request>& reqs) {
  int done = 0;
  check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), "MPI_Testall");
  return done != 0;
}
// A receive kept posted, at the end of the job's loop: cancelled (or, a
// closing marker or credit that matched meanwhile, completed).
inline void cancel_posted(MPI_Request& r) {
  if (r == MPI_REQUEST_NULL) return;
  check(MPI_Cancel(&r), "MPI_Cancel");
  check(MPI_Wait(&r, MPI_STATUS_IGNORE), "MPI_Wait");
}

// Items whose buffers a producer or consumer keeps for reuse: vectors only.
template <class T>
inline constexpr bool reuses_items = WireCustom<T>;

template <ProcessGroup G>
struct link_shared {
  link_shared(G& g, std::vector<int> producer_ranks, std::vector<int> consumer_ranks)
      : group(g), producers(std::move(producer_ranks)), consumers(std::move(consumer_ranks)) {
    for (int r : producers) producer |= r == g.rank();
    for (int r : consumers) consumer |= r == g.rank();
    const auto n = static_cast<std::size_t>(g.size());
    stats.taken_from.assign(n, 0);
    stats.credits_to.assign(n, 0);
    stats.credits_from.assign(n, 0);
  }

  G& group;
  const std::vector<int> producers, consumers;
  bool producer = false, consumer = false;  // this rank's roles

  // Guards what stage threads and the progress thread share: the parts'
  // queues and counts, and these.
  mutable std::mutex m;
  std::condition_variable cv;  // a blocked send or receive waits on it
  bool stopped = false;        // the job stopped: blocked calls end their stage
  link_stats stats;

  // With the group's MPI lock held only: the messages that end the
  // unsynchronised streams were posted (link_core::quiescent()), so every
  // later send is synchronous.
  bool streams_closed = false;
};

}  // namespace detail
}  // namespace dflash::mpi
