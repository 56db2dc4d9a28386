#pragma once
// device_channel: a bounded, stream-ordered channel of device-resident items
// between two GPU stages — what a dflash::device_link is made of.
//
//   host thread + stream A            host thread + stream B
//   producer ──▶ [slot k: Item (device buffers) | ready | consumed] ──▶ consumer
//      acquire: A waits consumed_k      pop:     B waits ready_k
//      fill on A, publish: record ready_k   use on B, release: record consumed_k
//
// K slots (K = depth), each owning its item and two events. Only a small
// handle (the slot index) crosses between host threads, through two bounded
// host queues: free slots and published slots. So
//   * the host blocks only when all K slots are in flight (backpressure) or
//     nothing is published — never on the device (no stream/event synchronize
//     on the per-item path: only record and stream-wait);
//   * close / drain / cancel, exactly-once and FIFO order of handles are the
//     host queues'.
// Blocked time is recorded as "<Name>.push_wait" (producer waiting for a free
// slot) and "<Name>.pop_wait" (consumer waiting for an item), like a queue.
//
//   dflash::device_channel<hs_slot<B>> ch(backend, 4);
//   auto s = ch.acquire(prod);            // prod waits until the slot's last reader finished
//   fill(s->item(), prod);                // enqueue work on prod
//   ch.publish(std::move(*s), prod);      // record ready; consumers may take it
//   auto r = ch.pop(cons);                // cons waits until the producer's work finished
//   use(r->item(), cons);
//   ch.release(std::move(*r), cons);      // record consumed; the slot is free again
//
// Destruction waits for the work in flight on every slot before its memory is
// freed (teardown, not the per-item path).
//
// Devices (a MultiDeviceBackend; device_stream::device() says whose stream it
// is): the producer and the consumer may be on different devices. A wait on
// another device's event needs nothing more (CUDA allows it), but a record
// needs an event of the stream's own device, so a slot keeps one event pair per
// device it was used on (made on first use). The slot's memory is on its
// producer's device; a consumer on another device reads it in place where the
// backend grants peer access (enabled once per pair of devices), and otherwise
// through an asynchronous peer copy into a mirror of the slot on its own device
// (the item's mirror_from, MirrorableItem), enqueued on its stream after the
// wait: no host synchronisation either way.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <mutex>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "dflash/detail/capacity.hpp"
#include "dflash/device/backend.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/bounded_queue.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

template <DeviceItem Item, ProfilerPolicy P = NullProfiler, fixed_string Name = "device_link">
class device_channel {
 public:
  using item_type = Item;
  using backend_type = typename Item::backend_type;
  using stream_type = device_stream<backend_type>;
  using keys = queue_keys<Name>;
  static constexpr auto name = Name;

 private:
  using B = backend_type;
  struct events {
    int device;
    typename B::event_type ready{}, consumed{};
  };
  struct slot {
    Item item{};
    std::vector<events> ev;          // one pair per device the slot was used on
    int ready_at = -1;               // ev index of the latest ready record (-1: none)
    int consumed_at = -1;            // ev index of the latest consumed record
    std::vector<std::pair<int, std::unique_ptr<Item>>> mirrors;  // per consumer device (peer copies)
  };

 public:
  /// A slot the caller may fill (from acquire) or read (from pop). Move-only;
  /// hand it back with publish/abandon or release.
  class slot_ref {
   public:
    slot_ref(slot_ref&& o) noexcept : s_(std::exchange(o.s_, nullptr)), index_(o.index_), item_(o.item_) {}
    slot_ref& operator=(slot_ref&&) = delete;
    /// The slot's item, or its mirror on the consumer's device.
    [[nodiscard]] Item& item() const noexcept { return *item_; }
    [[nodiscard]] std::size_t index() const noexcept { return index_; }

   private:
    friend class device_channel;
    slot_ref(slot* s, std::size_t i, Item* item) noexcept : s_(s), index_(i), item_(item) {}
    slot* s_;
    std::size_t index_;
    Item* item_;
  };

  device_channel(B& backend, std::size_t depth)
    requires std::is_empty_v<P>
      : device_channel(backend, depth, P{}) {}

  /// `backend` and `prof` must outlive the channel.
  device_channel(B& backend, std::size_t depth, const P& prof)
      : b_(backend), depth_(checked(depth)), slots_(std::make_unique<slot[]>(depth)), free_(depth), ready_(depth),
        prof_(prof) {
    for (std::size_t i = 0; i < depth_; ++i) {
      slots_[i].ev.reserve(1);
      if (free_.try_push(i) != queue_status::ok) throw std::logic_error("dflash::device_channel: free list");
    }
  }

  device_channel(const device_channel&) = delete;
  device_channel& operator=(const device_channel&) = delete;

  /// Waits (host-side, teardown only) for the work in flight on every slot,
  /// then frees the slots: no buffer is freed under running work.
  ~device_channel() {
    for (std::size_t i = 0; i < depth_; ++i)
      for (const events& e : slots_[i].ev) {
        quiet_wait(e.ready);
        quiet_wait(e.consumed);
      }
    for (std::size_t i = 0; i < depth_; ++i)
      for (const events& e : slots_[i].ev) {
        b_.destroy_event(e.ready);
        b_.destroy_event(e.consumed);
      }
  }

  // ---- producer ----------------------------------------------------------------
  /// A free slot for `s` to fill; blocks while all K slots are in flight.
  /// Work enqueued on `s` after this starts only once the slot's previous
  /// reader finished. Empty optional: the channel was cancelled.
  [[nodiscard]] std::optional<slot_ref> acquire(const stream_type& s) {
    const std::optional<std::size_t> i = timed_pop(free_, push_wait_key<Name>{});
    if (!i || cancelled_.load(std::memory_order_acquire)) {  // a closed free list still drains: not after cancel
      if (i) (void)free_.try_push(*i);
      return std::nullopt;
    }
    slot& sl = slots_[*i];
    if (sl.consumed_at >= 0) {
      try {
        b_.wait(s.native(), sl.ev[static_cast<std::size_t>(sl.consumed_at)].consumed);
      } catch (...) {
        (void)free_.push(*i);  // untouched: its last reader's marker still guards it
        throw;
      }
    }
    return slot_ref(&sl, *i, &sl.item);
  }

  /// Hands a filled slot to the consumers: records `ready` on `s` (after the
  /// work that fills it). false: closed or cancelled; the item is dropped and
  /// the slot recycled once the work enqueued on `s` is done with it.
  bool publish(slot_ref&& r, const stream_type& s) {
    const std::size_t i = take(r);
    slot& sl = slots_[i];
    try {
      const std::size_t e = events_of(sl, s.device());
      b_.record(sl.ev[e].ready, s.native());
      sl.ready_at = static_cast<int>(e);
    } catch (...) {
      give_back(i, s);  // not published; the stream's error is the one reported
      throw;
    }
    // A blocking push: only K handles exist, so the ready list always has room,
    // but try_push can still see "full" while a consumer's pop of the slot
    // before it is half done; push() waits those few instructions out.
    if (ready_.push(i)) return true;
    recycle(i, s);
    return false;
  }

  /// Returns a slot that was acquired but not published. Work `s` enqueued on
  /// it may still run: the next producer of the slot waits for it.
  void abandon(slot_ref&& r, const stream_type& s) { recycle(take(r), s); }

  /// No more items will be published: consumers drain what is there, then pop() is empty.
  void close() noexcept { ready_.close(); }

  /// Stop now: blocked and later acquire()/pop() return empty.
  void cancel() noexcept {
    cancelled_.store(true, std::memory_order_release);
    free_.close();
    ready_.close();
  }

  // ---- consumer ----------------------------------------------------------------
  /// The next published slot; work enqueued on `s` after this starts only once
  /// the producer's work on it finished. Empty optional: closed and drained, or cancelled.
  [[nodiscard]] std::optional<slot_ref> pop(const stream_type& s) {
    const std::optional<std::size_t> i = timed_pop(ready_, pop_wait_key<Name>{});
    if (!i || cancelled_.load(std::memory_order_acquire)) {
      if (i) (void)free_.try_push(*i);
      return std::nullopt;
    }
    slot& sl = slots_[*i];
    try {
      const int from = sl.ready_at >= 0 ? sl.ev[static_cast<std::size_t>(sl.ready_at)].device : s.device();
      if (!drop_this_wait()) b_.wait(s.native(), sl.ev[static_cast<std::size_t>(sl.ready_at)].ready);
      if (from == s.device() || reachable(s.device(), from)) return slot_ref(&sl, *i, &sl.item);
      return slot_ref(&sl, *i, &mirror(sl, from, s));
    } catch (...) {
      // The item is dropped and the slot goes back; the consumer reports the
      // error. s may not have waited for the producer's work, so the slot's
      // next marker on s would not cover it: the host waits for it first.
      quiet_wait(sl.ev[static_cast<std::size_t>(sl.ready_at)].ready);
      give_back(*i, s);
      throw;
    }
  }

  /// Returns a read slot: records `consumed` on `s` (after the work that reads
  /// it); the next producer of this slot waits for it.
  void release(slot_ref&& r, const stream_type& s) { recycle(take(r), s); }

  [[nodiscard]] std::size_t depth() const noexcept { return depth_; }
  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  [[nodiscard]] B& backend() const noexcept { return b_; }

  /// Test hook: the n-th pop() from now (1-based) skips its wait on `ready`,
  /// as a stage that forgot the wait would. Tests must catch the result.
  void drop_ready_wait_for_testing(std::uint64_t nth) noexcept {
    drop_at_.store(pops_.load(std::memory_order_relaxed) + nth, std::memory_order_relaxed);
  }
  /// Test hook: consumers on another device than the producer always take the
  /// peer-copy path, as without peer access (so a GPU pair with peer access tests it too).
  void force_peer_copy_for_testing() noexcept { force_copy_.store(true, std::memory_order_relaxed); }

 private:
  static std::size_t checked(std::size_t depth) {
    if (depth == 0)
      throw std::invalid_argument("dflash::device_channel '" + std::string(Name.view()) +
                                  "': depth must be at least 1 (got 0)");
    detail::check_capacity(depth, "dflash::device_channel '" + std::string(Name.view()) + "'");
    return depth;
  }
  // The slot goes back to the free list behind an event on the stream that
  // last used it: whoever acquires it next waits for that work, whatever
  // stream it runs on. A blocking push for the reason publish() gives; it
  // fails only after cancel(), when no one acquires again.
  // If s cannot take the marker (its device failed), the host waits for s's
  // work instead, then the slot goes back with the marker it had, and the
  // error is thrown: a failed call costs one error and one host wait, never a
  // slot that every later acquire would wait for in vain, nor one handed on
  // while work on s still reads it.
  void recycle(std::size_t i, const stream_type& s) {
    slot& sl = slots_[i];
    try {
      const std::size_t e = events_of(sl, s.device());
      b_.record(sl.ev[e].consumed, s.native());
      sl.consumed_at = static_cast<int>(e);
    } catch (...) {
      quiet_synchronize(s);
      (void)free_.push(i);
      throw;
    }
    (void)free_.push(i);
  }
  void quiet_synchronize(const stream_type& s) noexcept { detail::quiet_synchronize(b_, s.native()); }
  // recycle() on a path that is already throwing: the first error is the one reported.
  void give_back(std::size_t i, const stream_type& s) noexcept {
    try {
      recycle(i, s);
    } catch (...) {
    }
  }
  // The slot's event pair of device d, made on first use (on d: a record
  // needs an event of its stream's device). Only the slot's holder calls it.
  std::size_t events_of(slot& sl, int d) {
    for (std::size_t k = 0; k < sl.ev.size(); ++k)
      if (sl.ev[k].device == d) return k;
    on_device(d, [&] {
      events e{d, b_.create_event(false), {}};
      try {
        e.consumed = b_.create_event(false);
        sl.ev.push_back(e);
      } catch (...) {
        b_.destroy_event(e.ready);
        if (e.consumed) b_.destroy_event(e.consumed);
        throw;
      }
    });
    return sl.ev.size() - 1;
  }
  // Runs f with d as this thread's current device (a worker's thread already is on it).
  template <class F>
  void on_device(int d, F&& f) {
    if constexpr (MultiDeviceBackend<B>) {
      const int was = b_.current_device();
      if (was == d) return f();
      b_.set_device(d);
      try {
        f();
      } catch (...) {
        b_.set_device(was);
        throw;
      }
      b_.set_device(was);
    } else {
      f();
    }
  }
  // Can device d's work read device p's memory? Asked once per pair: where
  // the backend can, peer access is enabled then (from d).
  bool reachable(int d, int p) {
    if constexpr (MultiDeviceBackend<B>) {
      if (force_copy_.load(std::memory_order_relaxed)) return false;
      std::lock_guard lk(route_m_);
      for (const route& r : routes_)
        if (r.from == d && r.to == p) return r.peer;
      const bool peer = b_.can_access_peer(d, p);
      if (peer) on_device(d, [&] { b_.enable_peer_access(p); });
      routes_.push_back({d, p, peer});
      return peer;
    } else {
      return false;
    }
  }
  // The slot's item copied, in stream order on s, into its mirror on s's device.
  Item& mirror(slot& sl, int from, const stream_type& s) {
    if constexpr (MirrorableItem<Item>) {
      Item* m = nullptr;
      for (auto& [d, it] : sl.mirrors)
        if (d == s.device()) m = it.get();
      if (!m) m = sl.mirrors.emplace_back(s.device(), std::make_unique<Item>()).second.get();
      m->mirror_from(sl.item, s);
      return *m;
    } else {
      throw std::invalid_argument("dflash::device_channel '" + std::string(Name.view()) + "': the consumer on device " +
                                  std::to_string(s.device()) + " cannot reach the slot's memory on device " +
                                  std::to_string(from) +
                                  " (no peer access), and the item type has no mirror_from(const Item&, const "
                                  "device_stream<B>&) to copy it over: give it one (MirrorableItem), or place both "
                                  "stages on devices with peer access");
    }
  }
  static std::size_t take(slot_ref& r) {
    if (r.s_ == nullptr) throw std::logic_error("dflash::device_channel: slot handed back twice");
    r.s_ = nullptr;
    return r.index_;
  }
  // A blocking pop, timed under k with a stateful policy (nothing otherwise).
  template <class K>
  std::optional<std::size_t> timed_pop(bounded_queue<std::size_t>& q, K k) {
    if constexpr (P::enabled) {
      auto t = prof_->scope(k);
      return q.pop();
    } else {
      return q.pop();
    }
  }
  void quiet_wait(typename B::event_type e) noexcept { detail::quiet_host_wait(b_, e); }
  bool drop_this_wait() noexcept {
    const std::uint64_t n = pops_.fetch_add(1, std::memory_order_relaxed) + 1;
    return n == drop_at_.load(std::memory_order_relaxed);
  }

  B& b_;
  const std::size_t depth_;
  std::unique_ptr<slot[]> slots_;
  bounded_queue<std::size_t> free_;   // slots no one holds
  bounded_queue<std::size_t> ready_;  // published, in publish order
  [[no_unique_address]] profiler_ref<P> prof_;
  std::atomic<bool> cancelled_{false};
  std::atomic<std::uint64_t> pops_{0}, drop_at_{0};
  std::atomic<bool> force_copy_{false};
  struct route {
    int from, to;
    bool peer;
  };
  std::mutex route_m_;
  std::vector<route> routes_;  // pairs of devices asked about peer access, and the answer
};

}  // namespace dflash
