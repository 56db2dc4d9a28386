#pragma once
// The producer side of one rank's end of an mpi_link: send(), close(),
// take_sent(), batching the queued items into header messages (link_frame.hpp)
// and posting them with their buffers, completing sends, and the credits that
// come back.
//
// * A producer sends each item to the consumer with the fewest of its items
//   in flight.
// * Close: when a producer rank's pipeline ends normally (job::run), or it
//   calls close(), it sends FIN to every consumer after its last item; a
//   consumer's source returns "exhausted" once every producer's FIN and item
//   has arrived.

#include <mpi.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/link_batches.hpp"
#include "dflash/mpi/link_frame.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/owned_sends.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/pipeline/stop.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi::detail {

template <WireItem T, fixed_string Name, std::size_t Depth, ProcessGroup G>
class link_sender {
  using tags = link_tags<Name>;
  using batch = typename sent_batches<T>::batch;
  static constexpr bool reusable = reuses_items<T>;
  static_assert(WireCustom<T> || sizeof(T) <= link_frame::max_item_header,
                "dflash::mpi::mpi_link: a trivially copyable item crosses as one header message, at most about "
                "1 MiB; describe the item with dflash::mpi::wire<T> and put its large arrays in std::vector fields, "
                "so they cross as buffers of their own");

 public:
  explicit link_sender(link_shared<G>& s) : s_(s) {
    outstanding_.assign(s.consumers.size(), 0);
    unsync_headers_to_.assign(static_cast<std::size_t>(s.group.size()), 0);
  }

  /// wait(lk, ready) blocks until ready() (link_core::wait_driving); drive(work)
  /// makes the link's MPI calls on this thread if it can.
  template <class P, class Wait, class Drive>
  void send(T&& item, const P& prof, Wait&& wait, Drive&& drive) {
    if (!s_.producer) throw std::logic_error("dflash::mpi::mpi_link::send: this rank is not a producer of the link");
    // here, so an item MPI cannot carry fails this stage, not the progress thread
    link_frame::check_sendable<Name>(item);
    std::unique_lock lk(s_.m);
    if (closing_) throw std::logic_error(link_name<Name>() + ": send() after close()");
    if (in_flight_ >= Depth && !s_.stopped) {
      auto t = prof.scope(push_wait_key<Name>{});
      ++blocked_senders_;  // what is queued goes now, whatever is in flight
      wait(lk, [&] { return in_flight_ < Depth || s_.stopped; });
      --blocked_senders_;
    }
    if (s_.stopped) throw pipeline_stop{};
    // A close() while this send waited for a credit: FIN may be out already, and
    // an item after it would reach a consumer that has ended.
    if (closing_)
      throw std::logic_error(link_name<Name>() + ": send() after close() (close() was called while it waited)");
    ++in_flight_;
    outbox_.push_back(std::move(item));
    // With a header in flight the item waits to join the next batch (whoever
    // sees that header complete posts it: the progress thread polls meanwhile),
    // unless it fills the window: nothing more can join that batch.
    const bool post_now = headers_in_flight_ == 0 || in_flight_ >= Depth;
    lk.unlock();
    // Items with vectors: completed sends too, so take_sent() has items to refill.
    auto post = [this] {
      if constexpr (reusable) complete_sends();
      post_batches(s_.group.comm());
    };
    if (post_now && !drive(post)) s_.group.wake();
  }

  std::optional<T> take_sent() {
    if constexpr (!reusable) return std::nullopt;  // nothing kept: a new item costs as much
    std::lock_guard lk(s_.m);
    if (spent_.empty()) return std::nullopt;
    T x = std::move(spent_.back());
    spent_.pop_back();
    return x;
  }

  void close() {
    if (!s_.producer) throw std::logic_error("dflash::mpi::mpi_link::close: this rank is not a producer of the link");
    {
      std::lock_guard lk(s_.m);
      closing_ = true;
    }
    s_.group.wake();
  }

  // ---- with s_.m held ---------------------------------------------------------
  /// This rank's pipeline ended: FIN follows the last item.
  void closing() { closing_ = true; }
  /// Items sent and not yet credited back.
  [[nodiscard]] std::size_t in_flight() const noexcept { return in_flight_; }
  /// Items handed to send(), not yet posted.
  [[nodiscard]] std::size_t queued() const noexcept { return outbox_.size(); }
  /// The job stopped: what is not yet posted is dropped.
  void drop_queued() { outbox_.clear(); }
  /// Every item of a closing rank, its FIN included, was posted, and every send completed.
  [[nodiscard]] bool done() const {
    return sends_.empty() && (outbox_.empty() || s_.stopped) && !(closing_ && !fin_sent_);
  }

  // ---- with the group's MPI lock held -----------------------------------------
  bool progress(MPI_Comm c) {
    // completed sends first: their items go back to the producer for reuse (or go), so
    // a sink woken by the credits below finds them in take_sent()
    bool busy = complete_sends();
    busy |= receive_credits(c);
    busy |= post_batches(c);
    // FIN after the last item (same tag, so it cannot overtake the headers)
    bool fin_now = false;
    {
      std::lock_guard lk(s_.m);
      fin_now = closing_ && !fin_sent_ && outbox_.empty();
      fin_sent_ = fin_sent_ || fin_now;
    }
    if (fin_now) {
      for (int dest : s_.consumers) sends_.post_fin(dest, tags::header, c);
      busy = true;
    }
    return busy;
  }
  /// Ends the unsynchronised header streams. FIN (an MPI_Issend after the last
  /// batch) already ended them where it went; else a marker, only where
  /// unsynchronised messages went: a peer rank that never made the link (it
  /// failed first) never matches one, and nothing of ours is left unmatched
  /// there anyway.
  void end_streams(MPI_Comm c) {
    if (fin_sent_) return;
    for (int dest : s_.consumers)
      if (unsync_headers_to_[static_cast<std::size_t>(dest)])
        markers_.post({std::byte{link_frame::sync_marker}}, dest, tags::header, c);
  }
  /// The markers end_streams() posted were matched.
  bool streams_ended() {
    markers_.complete();
    return markers_.empty();
  }
  [[nodiscard]] bool requests_in_flight() const noexcept { return !sends_.empty() || !markers_.empty(); }
  /// Cancels the credit receive kept posted.
  void retire() { cancel_posted(credit_req_); }

 private:
  // Credits land in a receive kept posted (a test of it costs less than a
  // probe, and a message that finds it posted is not copied twice).
  bool receive_credits(MPI_Comm c) {
    bool busy = false;
    MPI_Status st;
    int flag = 0;
    for (;;) {
      if (credit_req_ == MPI_REQUEST_NULL)
        check(MPI_Irecv(&credit_in_, 1, MPI_UINT64_T, MPI_ANY_SOURCE, tags::credit, c, &credit_req_), "MPI_Irecv");
      check(MPI_Test(&credit_req_, &flag, &st), "MPI_Test");
      if (!flag) break;
      const std::uint64_t n = credit_in_;
      std::lock_guard lk(s_.m);
      in_flight_ -= std::min<std::uint64_t>(n, in_flight_);
      for (std::size_t i = 0; i < s_.consumers.size(); ++i)
        if (s_.consumers[i] == st.MPI_SOURCE) outstanding_[i] -= std::min<std::uint64_t>(n, outstanding_[i]);
      s_.stats.credits_from[static_cast<std::size_t>(st.MPI_SOURCE)] += n;
      s_.cv.notify_all();
      busy = true;
    }
    return busy;
  }

  // Everything the sink handed over: one batch per consumer, each to the
  // consumer with the fewest of this rank's items in flight at the time, in
  // header messages of at most link_frame::max_header_message bytes.
  bool post_batches(MPI_Comm c) {
    auto& to = to_;
    {
      std::lock_guard lk(s_.m);
      // Items queued while a header is in flight wait for it (they go as one
      // batch), unless they fill the window, the sink is blocked for credits
      // or it is closing.
      if (outbox_.empty() || (headers_in_flight_ > 0 && in_flight_ < Depth && blocked_senders_ == 0 && !closing_))
        return false;
      to.resize(s_.consumers.size());
      for (auto& x : outbox_) {
        std::size_t k = 0;
        for (std::size_t i = 1; i < s_.consumers.size(); ++i)
          if (outstanding_[i] < outstanding_[k]) k = i;
        ++outstanding_[k];
        ++s_.stats.sent;
        to[k].push_back(std::move(x));
      }
      outbox_.clear();
    }
    std::size_t headers = 0, largest = 0;
    auto post = [&](batch& b, int dest) {
      // after the closing marker every send must be matched before FINAL: synchronous
      sends_.post(b, dest, tags::header, tags::buffer, c, s_.streams_closed);
      if (!s_.streams_closed) unsync_headers_to_[static_cast<std::size_t>(dest)] = 1;
      largest = std::max(largest, b.items.size());
    };
    for (std::size_t k = 0; k < to.size(); ++k) {
      batch* b = nullptr;
      for (auto& x : to[k]) {
        if (b && b->header.size() + link_frame::framed(wire_header_bytes(x)) > link_frame::max_header_message) {
          post(*b, s_.consumers[k]);
          b = nullptr;
        }
        if (!b) {
          b = &sends_.open(to[k].size());
          ++headers;
        }
        sends_.add(*b, std::move(x));
      }
      to[k].clear();
      if (b) post(*b, s_.consumers[k]);
    }
    std::lock_guard lk(s_.m);
    headers_in_flight_ += headers;
    s_.stats.batches += headers;
    s_.stats.max_batch = std::max<std::uint64_t>(s_.stats.max_batch, largest);
    return true;
  }
  // Sends that completed: their records are kept for reuse, their items go
  // to take_sent() (items with vectors).
  bool complete_sends() {
    auto header_matched = [this] {
      std::lock_guard lk(s_.m);
      --headers_in_flight_;
    };
    auto sent = [this](std::vector<T>& items) {
      std::lock_guard lk(s_.m);
      if constexpr (reusable)
        for (auto& x : items)
          if (spent_.size() < Depth) spent_.push_back(std::move(x));
    };
    return sends_.complete(header_matched, sent);
  }

  link_shared<G>& s_;
  // with s_.m held
  std::size_t in_flight_ = 0;
  std::deque<T> outbox_;
  std::vector<T> spent_;                    // sent items for take_sent()
  std::vector<std::uint64_t> outstanding_;  // per consumer index
  bool closing_ = false, fin_sent_ = false;
  std::size_t headers_in_flight_ = 0;  // batch headers posted, not yet matched
  int blocked_senders_ = 0;            // sends waiting for a credit
  // with the group's MPI lock held only
  sent_batches<T> sends_;
  std::vector<char> unsync_headers_to_;     // per rank: an MPI_Isend went there (end_streams())
  owned_sends markers_;                     // the messages that end the header streams
  MPI_Request credit_req_ = MPI_REQUEST_NULL;  // kept posted (retire() cancels)
  std::uint64_t credit_in_ = 0;
  std::vector<std::vector<T>> to_;  // per consumer: the items of the batch being posted
};

}  // namespace dflash::mpi::detail
