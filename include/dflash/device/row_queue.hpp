#pragma once
// row_queue: the endpoint of a dflash::device_queue_link — a ring of rows in
// device memory (ring_control) between GPU stages' streams, where the number
// of rows a call pushes or pops is known only to the device.
//
//   producer call (stream A)                      consumer call (stream B)
//   acquire: host reserves Bound rows of room     pop: B waits the published calls' events,
//   the call's work pushes 0..Bound rows             a pop op reserves up to Batch rows (ticket
//   publish: copy the call's count to pinned         in device memory); the call's work reads them
//            memory, record `ready`               release: a release op frees the rows, copies
//                                                    the ticket to pinned memory, records `consumed`
//
// The host never waits for the device on the per-item path: it learns a
// count only by polling an event (query, never a wait) and then reading the
// pinned copy. Until then it counts with upper bounds:
//   * room: a producer may start when  reserved + Bound <= capacity + freed,
//     where reserved sums every call so far (its count once known, its Bound
//     before) and freed is the longest run of released positions from 0.
//     reserved only falls and freed only rises between acquires, so at every
//     moment the ring's enqueue position <= reserved <= capacity + freed: every
//     slot a push within Bound needs was last used by a position below freed,
//     released before the host saw its event, and the ring is never full for
//     it. A call that pushed more than Bound, or whose push did not fit, is an
//     error (its rows may be lost).
//   * rows: a pop is issued while published - popped - Batch * pops_in_flight
//     > 0 (an upper bound of the rows no pop in flight may take); the end is
//     exact: closed, every call published and counted, every pop counted, and
//     popped == pushed. A pop may find fewer rows than the bound promised (a
//     call pushed fewer than Bound; an earlier call's rows not yet written);
//     then its batch is short or empty, and the next pop takes the rest. A pop
//     issued once every count is known that comes back empty saw the ring
//     empty: when the pops before it are counted, popped must equal pushed,
//     or the counts lied (rows counted that no push delivered) and the run fails.
// Once work is enqueued for a record, a failing call does not reuse it (the
// work may still write it): the run fails and the queue is cancelled.
// Blocked host time is "<Name>.push_wait" (no room) and "<Name>.pop_wait".
//
// One device: every stream on the ring's device (its memory is allocated there).

#include "dflash/detail/require_cccl.hpp"  // first: ring_control needs libcu++

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/detail/capacity.hpp"
#include "dflash/device/backend.hpp"
#include "dflash/device/device_rows.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/device/row_ring_ops.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

template <class Row, DeviceBackend B, ProfilerPolicy P, fixed_string Name, std::uint32_t Bound, std::uint32_t Batch>
class row_queue {
  static_assert(Bound >= 1, "dflash::device_queue_link: MaxRowsPerPush must be at least 1");
  static_assert(Batch >= 1, "dflash::device_queue_link: BatchRows must be at least 1");

 public:
  using item_type = device_rows<Row, B>;
  using backend_type = B;
  using stream_type = device_stream<B>;
  using keys = queue_keys<Name>;
  static constexpr auto name = Name;

 private:
  using event = typename B::event_type;
  enum class state : std::uint8_t { idle, filling, published, reading, released };
  struct record {  // one producer call or one consumer call in flight
    std::size_t index = 0;
    state st = state::idle;
    event ev{};                             // ready (producer) or consumed (consumer)
    void* device = nullptr;                 // pushed counter or ticket, device memory
    void* pinned = nullptr;                 // its copy, host memory the device writes
    item_type item{};
    // Flow stamps (the pipeline's, by record index) of a producer call are read
    // by the consumer of a batch until it releases the batch: a pinned record
    // is not reused, so no producer writes the stamp meanwhile.
    int pins = 0;
    bool parked = false;      // resolved while pinned: free once unpinned
    record* stamp_of = nullptr;  // a batch: the producer call whose stamp it carries
    bool after_all_counted = false;  // a batch popped when every producer count was known
  };

 public:
  /// A call's rows: its pusher or its batch. Move-only; hand it back with
  /// publish/abandon or release.
  class slot_ref {
   public:
    slot_ref(slot_ref&& o) noexcept : r_(std::exchange(o.r_, nullptr)), index_(o.index_) {}
    slot_ref& operator=(slot_ref&&) = delete;
    [[nodiscard]] item_type& item() const noexcept { return r_->item; }
    /// For flow stamps: the producer call's record, or (a batch) the oldest call published before the pop.
    [[nodiscard]] std::size_t index() const noexcept { return index_; }

   private:
    friend class row_queue;
    slot_ref(record* r, std::size_t index) noexcept : r_(r), index_(index) {}
    record* r_;
    std::size_t index_;
  };

  /// `backend` and `prof` must outlive the queue. capacity: rows in the ring.
  row_queue(B& backend, std::size_t capacity, const P& prof) : b_(backend), cap_(checked(capacity)), prof_(prof) {
    setup_ = b_.create_stream();
    try {
      const auto bytes = ring_control::storage_for(cap_, sizeof(Row), "dflash::device_queue_link");
      header_ = b_.allocate(sizeof(ring_header), setup_);
      seq_ = b_.allocate(bytes.sequence, setup_);
      data_ = b_.allocate(bytes.slots, setup_);
      ctl_ = ring_control(static_cast<ring_header*>(header_), static_cast<unsigned long long*>(seq_), cap_);
      row_ring_ops<B>::init(b_, ctl_, setup_);
      b_.synchronize(setup_);  // construction, not the per-item path
    } catch (...) {
      free_storage();
      throw;
    }
  }
  row_queue(B& backend, std::size_t capacity)
    requires std::is_empty_v<P>
      : row_queue(backend, capacity, P{}) {}
  row_queue(const row_queue&) = delete;
  row_queue& operator=(const row_queue&) = delete;

  /// Waits (teardown only) for every call's work in flight, then frees the ring.
  ~row_queue() {
    for (auto* list : {&producers_, &consumers_})
      for (auto& r : *list) {
        if (r->st != state::idle) quiet_wait(r->ev);
        b_.destroy_event(r->ev);
        b_.deallocate(r->device, setup_);
        b_.deallocate_host(r->pinned);
      }
    free_storage();
  }

  // ---- producer ----------------------------------------------------------------
  /// Room for Bound rows, for a call whose work `s` enqueues next; blocks
  /// while the ring may not have it. Empty optional: cancelled.
  [[nodiscard]] std::optional<slot_ref> acquire(const stream_type& s) {
    auto t = prof_.get().scope(push_wait_key<Name>{});
    record* r = nullptr;
    {
      std::unique_lock lk(m_);
      for (;;) {
        if (cancelled_) return std::nullopt;
        resolve_locked();
        // (records are the pipeline's stamp indices: fewer than the capacity)
        if (reserved_ + Bound <= cap_ + freed_ && (!free_producers_.empty() || producers_.size() < cap_)) break;
        wait_locked(lk, s);
      }
      r = take_locked(producers_, free_producers_, sizeof(unsigned long long));
      // Idle, so its last copy is done. A stream whose work failed skips the
      // copy: the count reads 0, not the last call's, and the stream's error is the run's.
      *static_cast<unsigned long long*>(r->pinned) = 0;
      r->st = state::filling;
      reserved_ += Bound;
      ++filling_;
    }
    try {
      row_ring_ops<B>::zero(b_, static_cast<unsigned long long*>(r->device), s.native());
    } catch (...) {
      finish_unpublished(r);
      throw;
    }
    r->item.push_ = row_pusher<Row>{ctl_, static_cast<Row*>(data_), static_cast<unsigned long long*>(r->device), Bound};
    r->item.batch_ = {};
    return slot_ref(r, r->index);
  }

  /// The call's rows are for the consumers once its work (enqueued on `s`
  /// before this) is done. false: cancelled.
  bool publish(slot_ref&& ref, const stream_type& s) {
    record* r = std::exchange(ref.r_, nullptr);
    // On a throw the record stays filling, its room reserved: the call's work is
    // enqueued and may still push, and the copy may still land.
    b_.copy(r->pinned, r->device, sizeof(unsigned long long), s.native());
    b_.record(r->ev, s.native());
    std::lock_guard lk(m_);
    r->st = state::published;
    published_ += Bound;
    --filling_;
    cv_.notify_all();
    return !cancelled_;
  }
  /// A call that ends the source: whatever it pushed still counts.
  void abandon(slot_ref&& ref, const stream_type& s) { (void)publish(std::move(ref), s); }

  /// No more producer calls: consumers drain every row, then pop() is empty.
  void close() noexcept {
    std::lock_guard lk(m_);
    closed_ = true;
    cv_.notify_all();
  }
  /// Stop now: blocked and later acquire()/pop() return empty.
  void cancel() noexcept {
    std::lock_guard lk(m_);
    cancelled_ = true;
    cv_.notify_all();
  }

  // ---- consumer ----------------------------------------------------------------
  /// Up to Batch rows for work `s` enqueues next (the count is the batch's,
  /// on the device). Empty optional: closed and every row popped, or cancelled.
  [[nodiscard]] std::optional<slot_ref> pop(const stream_type& s) {
    auto t = prof_.get().scope(pop_wait_key<Name>{});
    record* r = nullptr;
    std::vector<event> after;
    record* oldest = nullptr;
    {
      std::unique_lock lk(m_);
      std::size_t unresolved = 0;  // published calls still running
      for (;;) {
        if (cancelled_) return std::nullopt;
        unresolved = resolve_locked();
        if (seen_empty_ && popping_ == 0 && popped_ != pushed_) throw miscount();
        const long long room = static_cast<long long>(published_) - static_cast<long long>(popped_) -
                               static_cast<long long>(Batch) * static_cast<long long>(popping_);
        if (room > 0) break;
        if (closed_ && filling_ == 0 && popping_ == 0 && unresolved == 0) {
          if (popped_ != pushed_) throw miscount();
          return std::nullopt;
        }
        wait_locked(lk, s);
      }
      const bool all_counted = closed_ && filling_ == 0 && unresolved == 0;
      for (auto& p : producers_)
        if (p->st == state::published) {
          after.push_back(p->ev);
          if (!oldest || p->index < oldest->index) oldest = p.get();
        }
      if (!oldest) oldest = last_;  // something was published: it is resolved if none is pending
      r = take_locked(consumers_, free_consumers_, sizeof(ring_ticket));
      r->stamp_of = oldest;
      r->after_all_counted = all_counted;
      if (oldest) ++oldest->pins;
      *static_cast<ring_ticket*>(r->pinned) = ring_ticket{ring_status::empty, 0, 0};  // as for the producers' counts
      r->st = state::reading;
      ++popping_;
    }
    // On a throw the record stays out of use: the pop op may be enqueued (it
    // reports a launch error after the launch), and its rows are the failed run's.
    for (event e : after) b_.wait(s.native(), e);
    row_ring_ops<B>::pop(b_, ctl_, Batch, static_cast<ring_ticket*>(r->device), s.native());
    r->item.push_ = {};
    r->item.batch_ = row_batch<Row>{static_cast<const Row*>(data_), cap_, static_cast<const ring_ticket*>(r->device)};
    return slot_ref(r, oldest ? oldest->index : 0);
  }

  /// The batch's rows go back to producers once the work `s` enqueued on
  /// them is done.
  void release(slot_ref&& ref, const stream_type& s) {
    record* r = std::exchange(ref.r_, nullptr);  // (on a throw it stays reading, as in pop)
    row_ring_ops<B>::release(b_, ctl_, static_cast<const ring_ticket*>(r->device), s.native());
    b_.copy(r->pinned, r->device, sizeof(ring_ticket), s.native());
    b_.record(r->ev, s.native());
    std::lock_guard lk(m_);
    r->st = state::released;
    unpin_locked(std::exchange(r->stamp_of, nullptr));
    cv_.notify_all();
  }

  // ---- counts (exact once the calls in flight are done) --------------------------
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  [[nodiscard]] std::uint64_t rows_pushed() const {
    std::lock_guard lk(m_);
    return pushed_;
  }
  [[nodiscard]] std::uint64_t rows_popped() const {
    std::lock_guard lk(m_);
    return popped_;
  }

 private:
  static std::size_t checked(std::size_t capacity) {
    ring_control::check_capacity(capacity, "dflash::device_queue_link (its capacity, in rows)");
    if (capacity < Bound)
      throw std::invalid_argument("dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: capacity " +
                                  std::to_string(capacity) + " is below MaxRowsPerPush " + std::to_string(Bound) +
                                  " (one call's rows must fit the ring)");
    return capacity;
  }

  // A free record of the list, or a new one (its device word and pinned copy of `bytes`).
  record* take_locked(std::vector<std::unique_ptr<record>>& list, std::vector<record*>& free, std::size_t bytes) {
    if (!free.empty()) {
      record* r = free.back();
      free.pop_back();
      return r;
    }
    auto r = std::make_unique<record>();
    r->index = list.size();
    r->ev = b_.create_event(false);
    r->device = b_.allocate(bytes, setup_);
    r->pinned = b_.allocate_host(bytes);
    // The allocation is ordered on the setup stream; the calls' streams use it
    // next, so the setup stream's work is done first (rare: pools grow to the peak).
    b_.synchronize(setup_);
    list.push_back(std::move(r));
    return list.back().get();
  }

  // Calls whose event completed: their counts, read from the pinned copies.
  // Returns how many published calls are still running.
  std::size_t resolve_locked() {
    std::size_t unresolved = 0;
    for (auto& p : producers_) {
      if (p->st != state::published) continue;
      if (!b_.query(p->ev)) {
        ++unresolved;
        continue;
      }
      const unsigned long long word = *static_cast<const unsigned long long*>(p->pinned);
      const unsigned long long n = word & ~row_pusher<Row>::failed_bit;
      if (n > Bound && !error_)
        error_ = std::make_exception_ptr(std::runtime_error(
            "dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: a producer call pushed " +
            std::to_string(n) + " rows, more than MaxRowsPerPush = " + std::to_string(Bound) +
            "; the link reserved room for " + std::to_string(Bound) + ", so rows past it may have been lost"));
      if ((word & row_pusher<Row>::failed_bit) && !error_)
        error_ = std::make_exception_ptr(std::runtime_error(
            "dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: a push of a producer call (" +
            std::to_string(n) + " rows asked) did not fit the ring; its rows are lost"));
      const unsigned long long counted = std::min<unsigned long long>(n, Bound);
      reserved_ -= Bound - counted;
      published_ -= Bound - counted;
      pushed_ += counted;
      p->st = state::idle;
      p->parked = true;
      ++p->pins;  // the newest resolved call: a later batch may carry its stamp
      unpin_locked(std::exchange(last_, p.get()));
    }
    for (auto& c : consumers_) {
      if (c->st != state::released) continue;
      if (!b_.query(c->ev)) continue;
      const ring_ticket tk = *static_cast<const ring_ticket*>(c->pinned);
      popped_ += tk.count;
      if (c->after_all_counted && tk.count == 0) seen_empty_ = true;
      if (tk.count > 0) released_[tk.first] = tk.count;
      for (auto it = released_.find(freed_); it != released_.end(); it = released_.find(freed_)) {
        freed_ += it->second;
        released_.erase(it);
      }
      --popping_;
      c->st = state::idle;
      free_consumers_.push_back(c.get());
    }
    if (error_) std::rethrow_exception(error_);
    return unresolved;
  }
  // Blocked: nothing the host can learn without the device. Poll (a wait on an
  // event would block a host thread on the device for longer than the next
  // publish or release may need), and stop on the caller's stream's error:
  // a failed stream skips its copies, so the counts it owed never come, and
  // a thread waiting for them would wait forever.
  // (check() never blocks and the streams' work never takes m_: it may run under the lock.)
  void wait_locked(std::unique_lock<std::mutex>& lk, const stream_type& s) {
    b_.check(s.native());
    cv_.wait_for(lk, std::chrono::microseconds(50));
  }

  std::logic_error miscount() const {
    return std::logic_error("dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: the ring is empty with " +
                            std::to_string(pushed_) + " rows counted and " + std::to_string(popped_) +
                            " popped (a group counted rows it did not push: row_pusher::count)");
  }
  void unpin_locked(record* r) noexcept {
    if (r && --r->pins == 0 && r->parked) {
      r->parked = false;
      free_producers_.push_back(r);
    }
  }
  void finish_unpublished(record* r) noexcept {
    std::lock_guard lk(m_);
    reserved_ -= Bound;
    --filling_;
    r->st = state::idle;
    free_producers_.push_back(r);
    cv_.notify_all();
  }
  void quiet_wait(event e) noexcept {
    try {
      b_.host_wait(e);
    } catch (...) {  // the stream's error was reported where it happened
    }
  }
  void free_storage() noexcept {
    try {
      b_.deallocate(data_, setup_);
      b_.deallocate(seq_, setup_);
      b_.deallocate(header_, setup_);
      b_.synchronize(setup_);
    } catch (...) {
    }
    b_.destroy_stream(setup_);
  }

  B& b_;
  const std::size_t cap_;
  [[no_unique_address]] profiler_ref<P> prof_;
  typename B::stream_type setup_{};
  void* header_ = nullptr;
  void* seq_ = nullptr;
  void* data_ = nullptr;
  ring_control ctl_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<record>> producers_, consumers_;
  std::vector<record*> free_producers_, free_consumers_;
  std::exception_ptr error_;
  unsigned long long reserved_ = 0;   // every call so far: its count, or Bound while unknown
  unsigned long long published_ = 0;  // the published calls among them
  unsigned long long pushed_ = 0;     // counted rows of resolved calls
  unsigned long long popped_ = 0;     // rows of completed pops
  unsigned long long freed_ = 0;      // positions [0, freed_) released
  std::map<unsigned long long, unsigned long long> released_;  // released runs above freed_: first -> count
  std::size_t filling_ = 0, popping_ = 0;
  record* last_ = nullptr;  // the newest resolved producer call (pinned while it is)
  bool closed_ = false, cancelled_ = false;
  bool seen_empty_ = false;  // a pop issued once every count was known found no row
};

}  // namespace dflash
