#pragma once
// The consumer side of one rank's end of an mpi_link: receive(), recycle(),
// the header receive kept posted, parsing each batch (link_frame.hpp) and
// validating its items, the receives of their buffers, rejects, and the
// credits owed for what the source stage took (link_credits.hpp).
//
// * Validation: a consumer checks each header against its wire<T> layout and
//   each size against the buffer message that arrived (matched probes)
//   before it allocates; an item that does not fit fails the job with the
//   reason (its bytes are still received, so every send completes). So does
//   a batch from a producer built with another version of the frame: its
//   buffers are received and dropped.

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/mpi/link_arrivals.hpp"
#include "dflash/mpi/link_credits.hpp"
#include "dflash/mpi/link_frame.hpp"
#include "dflash/mpi/link_shared.hpp"
#include "dflash/mpi/wire.hpp"
#include "dflash/pipeline/stop.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash::mpi::detail {

template <WireItem T, fixed_string Name, std::size_t Depth, ProcessGroup G>
class link_receiver {
  using tags = link_tags<Name>;
  static constexpr bool reusable = reuses_items<T>;

 public:
  link_receiver(link_shared<G>& s, link_credits<G>& credits)
      : s_(s), credits_(credits), arrivals_(static_cast<std::size_t>(s.group.size())) {
    const auto n = static_cast<std::size_t>(s.group.size());
    buffered_.assign(n, 0);
  }

  /// wait(lk, ready) blocks until ready() (link_core::wait_driving); drive(work)
  /// makes the link's MPI calls on this thread if it can.
  template <class P, class Wait, class Drive>
  std::optional<T> receive(const P& prof, int* from, Wait&& wait, Drive&& drive) {
    if (!s_.consumer) throw std::logic_error("dflash::mpi::mpi_link::receive: this rank is not a consumer of the link");
    std::unique_lock lk(s_.m);
    if (inbox_.empty() && !closed_ && !s_.stopped) {
      auto t = prof.scope(pop_wait_key<Name>{});
      wait(lk, [&] { return !inbox_.empty() || closed_ || s_.stopped; });
    }
    if (s_.stopped) throw pipeline_stop{};
    if (inbox_.empty()) return std::nullopt;  // closed
    auto [item, src] = std::move(inbox_.front());
    inbox_.pop_front();
    const auto r = static_cast<std::size_t>(src);
    --buffered_[r];
    credits_.owe(r);
    const bool credits_go = credits_.due(r, buffered_[r], /*idle=*/false, ending());
    ++s_.stats.received;
    ++s_.stats.taken_from[r];
    lk.unlock();
    if (from) *from = src;
    if (credits_go && !drive([this] { post_credits(s_.group.comm(), /*idle=*/false); })) s_.group.wake();
    return std::move(item);
  }

  void recycle(T&& item) {
    if constexpr (!reusable) return;  // no vectors to keep: receiving into it saves nothing
    std::lock_guard lk(s_.m);
    if (spare_.size() < Depth) spare_.push_back(std::move(item));
  }

  // ---- with s_.m held ---------------------------------------------------------
  /// An item arrived that the source stage has not taken.
  [[nodiscard]] bool holds_items() const noexcept { return !inbox_.empty(); }
  /// Every producer's FIN arrived.
  [[nodiscard]] bool all_fins() const noexcept { return fins_ == s_.producers.size(); }

  // ---- with the group's MPI lock held -----------------------------------------
  bool progress(MPI_Comm c, bool idle) {
    bool busy = receive_headers(c);
    busy |= arrivals_.match(c, tags::buffer, [this](int src, const std::string& why) { report_reject(src, why); });
    busy |= deliver();
    {
      std::lock_guard lk(s_.m);
      if (!closed_ && all_fins() && arrivals_.empty()) {
        closed_ = true;
        s_.cv.notify_all();
      }
    }
    busy |= post_credits(c, idle);
    receiving_.store(arrivals_.size(), std::memory_order_relaxed);
    return busy;
  }
  [[nodiscard]] bool requests_in_flight() const noexcept { return !arrivals_.empty(); }
  /// Items whose receives are not complete (any thread; exact once the job's loop ended).
  [[nodiscard]] std::size_t receiving() const noexcept { return receiving_.load(std::memory_order_relaxed); }
  /// The end of the job's loop: cancels the header receive kept posted, and
  /// completes what arrived of a stopped run (arriving_items::retire).
  void retire() {
    cancel_posted(header_req_);
    arrivals_.retire();
    receiving_.store(0, std::memory_order_relaxed);
  }

 private:
  // With s_.m held: the job stopped or every producer ended (credit_policy.hpp).
  [[nodiscard]] bool ending() const noexcept { return s_.stopped || all_fins(); }

  // Credits for what the source stage took, in batches (link_credits::due).
  bool post_credits(MPI_Comm c, bool idle) {
    {
      std::lock_guard lk(s_.m);
      credits_.collect(buffered_, idle, ending());
    }
    return credits_.post(c);
  }

  // Headers (or FIN) into the receive kept posted (see link_sender::receive_credits).
  bool receive_headers(MPI_Comm c) {
    bool busy = false;
    MPI_Status st;
    int flag = 0;
    for (;;) {
      if (header_req_ == MPI_REQUEST_NULL) {
        header_in_.resize(link_frame::max_header_message);
        check(MPI_Irecv(header_in_.data(), static_cast<int>(header_in_.size()), MPI_BYTE, MPI_ANY_SOURCE,
                        tags::header, c, &header_req_),
              "MPI_Irecv");
      }
      check(MPI_Test(&header_req_, &flag, &st), "MPI_Test");
      if (!flag) break;
      int n = 0;
      MPI_Get_count(&st, MPI_BYTE, &n);
      busy = true;
      const auto size = static_cast<std::size_t>(n);
      if (link_frame::is_fin(size)) {
        std::lock_guard lk(s_.m);
        ++fins_;
        continue;
      }
      if (link_frame::is_sync(header_in_.data(), size)) continue;
      parse_batch(header_in_.data(), size, st.MPI_SOURCE);
    }
    return busy;
  }

  // A batch header into items (into recycled ones where there are some): an
  // item with no buffers and none of its producer's ahead of it goes to the
  // source stage at once, the others wait among the arrivals for their buffers.
  void parse_batch(const std::byte* h, const std::size_t size, int src) {
    const auto s = static_cast<std::size_t>(src);
    if (arrivals_.dropped(s)) return;  // reported; its buffer messages are dropped
    switch (link_frame::parse(h, size, items_)) {
      case link_frame::parsed::ok:
        break;
      case link_frame::parsed::other_version:
        arrivals_.drop(s);
        s_.group.fail(link_name<Name>() + ": rank " + std::to_string(src) + " sends frames of protocol version " +
                      std::to_string(static_cast<unsigned>(h[1])) + ", this rank reads version " +
                      std::to_string(unsigned{link_frame::protocol_version}) +
                      " (the ranks run programs built with different versions of dflash)");
        return;
      case link_frame::parsed::malformed:  // not from an mpi_link: nothing can be drained
        throw std::runtime_error(link_name<Name>() + ": malformed item header from rank " + std::to_string(src));
    }
    std::string why;
    bool delivered = false;
    std::lock_guard lk(s_.m);
    auto spare = [&] {
      T x{};
      if (!spare_.empty()) {
        x = std::move(spare_.back());
        spare_.pop_back();
      }
      return x;
    };
    for (const auto& it : items_) {
      if (it.nbufs == 0 && !arrivals_.waiting(s)) {
        T x = spare();
        std::vector<wire_buffer> none;
        if (auto w = fit_item(x, h + it.at, it.len, 0, {}, none); !w.empty()) {
          ++s_.stats.rejected;
          if (why.empty()) why = std::move(w);
          continue;
        }
        inbox_.emplace_back(std::move(x), src);
        ++buffered_[s];
        delivered = true;
        continue;
      }
      arrivals_.add(spare(), src, it.nbufs, h + it.at, it.len);
      ++buffered_[s];
    }
    s_.stats.max_buffered_per_producer = std::max<std::uint64_t>(s_.stats.max_buffered_per_producer, buffered_[s]);
    if (delivered) s_.cv.notify_all();
    if (!why.empty()) report_reject(src, why);
  }

  void report_reject(int src, const std::string& why) {
    if (reported_) return;
    reported_ = true;
    s_.group.fail(link_name<Name>() + ": an item from rank " + std::to_string(src) +
                  " does not fit this rank's wire<T> layout (producer and consumer disagree on the item type): " + why);
  }

  // Complete items go to the source stage, in arrival order per producer (one
  // lock and one notification for all of them).
  bool deliver() {
    std::unique_lock lk(s_.m, std::defer_lock);
    bool delivered = false;
    const bool busy = arrivals_.complete([&](auto& a) {
      if (!lk.owns_lock()) lk.lock();
      if (a.rejected) {
        --buffered_[static_cast<std::size_t>(a.src)];
        ++s_.stats.rejected;
      } else {
        inbox_.emplace_back(std::move(a.item), a.src);
        delivered = true;
      }
    });
    if (delivered) s_.cv.notify_all();
    return busy;
  }

  link_shared<G>& s_;
  link_credits<G>& credits_;
  // with s_.m held
  bool closed_ = false;
  std::deque<std::pair<T, int>> inbox_;
  std::vector<T> spare_;                 // recycled items to receive into
  std::vector<std::uint64_t> buffered_;  // per rank: its items here, arrived or on their way
  std::size_t fins_ = 0;
  // with the group's MPI lock held only
  arriving_items<T> arrivals_;
  std::vector<std::byte> header_in_;              // the posted header receive's buffer
  MPI_Request header_req_ = MPI_REQUEST_NULL;     // kept posted (retire() cancels)
  std::atomic<std::size_t> receiving_{0};         // arrivals_.size(), for stats() on any thread
  bool reported_ = false;                         // a reject failed the job already
  // scratch, kept to allocate nothing per pass
  std::vector<link_frame::item> items_;
};

}  // namespace dflash::mpi::detail
