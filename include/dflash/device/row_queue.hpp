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
// Bound and Batch are the link's MaxRowsPerPush and BatchRows (or the
// shape's rows[link] sizes). The host never waits for the device on the per-item path: it learns a
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
//   * rows (partial_batches, the default): a pop is issued while published -
//     popped - Batch * pops_in_flight > 0 (an upper bound of the rows no pop
//     in flight may take); the end is
//     exact: closed, every call published and counted, every pop counted, and
//     popped == pushed. A pop may find fewer rows than the bound promised (a
//     call pushed fewer than Bound; an earlier call's rows not yet written);
//     then its batch is short or empty, and the next pop takes the rest. A pop
//     issued once every count is known that comes back empty saw the ring
//     empty: when the pops before it are counted, popped must equal pushed,
//     or the counts lied (rows counted that no push delivered) and the run fails.
//   * rows (full_batches): a pop is issued only once pushed - popped - Batch *
//     pops_in_flight >= Batch with counts the host has read (calls it saw
//     complete, polled), and it takes exactly Batch rows or none: the device
//     finds fewer only when a call still running reserved positions among the
//     counted rows. Then its batch is empty, and no pop follows until a count
//     rises past the one it was issued at (that call's, once it completed:
//     it holds rows). Once every call is counted the
//     last pop takes the rest (a short batch). The price: a consumer enqueues
//     its pop after the producers' work completed, never before.
// Once work is enqueued for a record, a failing call does not reuse it (the
// work may still write it): the run fails and the queue is cancelled.
// Blocked host time is "<Name>.push_wait" (no room) and "<Name>.pop_wait";
// counts (rows in and out, batches, the ring's fill at each pop) are stats().
//
// One device: every stream on the ring's device (its memory is allocated there).

#include "dflash/detail/require_cccl.hpp"  // first: ring_control needs libcu++

#include <algorithm>
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
#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/shape.hpp"
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

/// How a device_queue_link's consumer calls fill their batches (its Fill).
/// partial_batches: a pop takes what is there, up to the batch size, as soon
/// as rows may be there — the lowest latency; batches are short whenever the
/// producers' calls push fewer rows than a batch.
struct partial_batches {};
/// full_batches: a pop is issued once the host has counted a whole batch
/// (polled, never waited for), so every batch but the last has exactly the
/// batch size — fixed-size work for the consumer (a training step of a fixed
/// token count); its pops follow the producers' completed work.
struct full_batches {};

template <class T>
concept BatchFill = std::is_same_v<T, partial_batches> || std::is_same_v<T, full_batches>;

/// What a row_queue counted: rows in and out, batches, and the rows the host
/// knew were in the ring at each pop (a sampled fill level).
struct row_queue_stats {
  std::uint64_t rows_in = 0, rows_out = 0;
  std::uint64_t batches = 0, short_batches = 0, empty_batches = 0;  ///< completed pops; short: 1 row to below the batch size
  std::uint64_t fill_samples = 0, fill_sum = 0, fill_max = 0;       ///< counted rows not yet popped, at each pop
  [[nodiscard]] double mean_fill() const noexcept {
    return fill_samples ? static_cast<double>(fill_sum) / static_cast<double>(fill_samples) : 0.0;
  }
};

template <class Row, DeviceBackend B, ProfilerPolicy P, fixed_string Name, class Elem = void,
          BatchFill Fill = partial_batches>
class row_queue {
 public:
  using item_type = device_rows<Row, B, Elem>;
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
    unsigned long long counted_at_pop = 0;  // a batch: pushed_ when it was popped
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

  /// `backend` and `prof` must outlive the queue. capacity: rows in the ring;
  /// sizes: the rows one producer call may push and one consumer call gets
  /// (both at least 1), and the payload's width (Elem not void: at least 1;
  /// else 0). std::invalid_argument names what is wrong.
  row_queue(B& backend, std::size_t capacity, const row_sizes& sizes, const P& prof)
      : b_(backend),
        cap_(checked(capacity, sizes)),
        bound_(static_cast<std::uint32_t>(sizes.max_per_push)),
        batch_(static_cast<std::uint32_t>(sizes.batch)),
        width_(static_cast<std::uint32_t>(sizes.width)),
        prof_(prof) {
    setup_ = b_.create_stream();
    try {
      const auto bytes = ring_control::storage_for(cap_, sizeof(Row), "dflash::device_queue_link");
      header_ = b_.allocate(sizeof(ring_header), setup_);
      seq_ = b_.allocate(bytes.sequence, setup_);
      data_ = b_.allocate(bytes.slots, setup_);
      if constexpr (has_payload)
        payload_ = b_.allocate(ring_control::storage_for(cap_, sizeof(Elem) * width_, "dflash::device_queue_link (payloads)").slots,
                               setup_);
      ctl_ = ring_control(static_cast<ring_header*>(header_), static_cast<unsigned long long*>(seq_), cap_);
      row_ring_ops<B>::init(b_, ctl_, setup_);
      b_.synchronize(setup_);  // construction, not the per-item path
    } catch (...) {
      free_storage();
      throw;
    }
  }
  row_queue(B& backend, std::size_t capacity, const row_sizes& sizes)
    requires std::is_empty_v<P>
      : row_queue(backend, capacity, sizes, P{}) {}
  row_queue(const row_queue&) = delete;
  row_queue& operator=(const row_queue&) = delete;

  /// Waits (teardown only) for every call's work in flight, then frees the ring.
  ~row_queue() {
    for (auto* list : {&producers_, &consumers_})
      for (auto& r : *list) {
        if (r->st != state::idle) quiet_wait(r->ev);
        free_record(*r);
      }
    free_storage();
  }

  // ---- producer ----------------------------------------------------------------
  /// Room for the bound's rows, for a call whose work `s` enqueues next; blocks
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
        if (reserved_ + bound_ <= cap_ + freed_ && (!free_producers_.empty() || producers_.size() < cap_)) break;
        wait_locked(lk, s);
      }
      r = take_locked(producers_, free_producers_, sizeof(unsigned long long));
      // Idle, so its last copy is done. A stream whose work failed skips the
      // copy: the count reads 0, not the last call's, and the stream's error is the run's.
      *static_cast<unsigned long long*>(r->pinned) = 0;
      r->st = state::filling;
      reserved_ += bound_;
      ++filling_;
    }
    try {
      row_ring_ops<B>::zero(b_, static_cast<unsigned long long*>(r->device), s.native());
    } catch (...) {
      finish_unpublished(r);
      throw;
    }
    r->item.push_ = row_pusher<Row, Elem>{ctl_,   static_cast<Row*>(data_), static_cast<Elem*>(payload_),
                                          width_, static_cast<unsigned long long*>(r->device), bound_};
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
    published_ += bound_;
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
  /// Up to the batch size's rows (full_batches: exactly, but the last) for
  /// work `s` enqueues next (the count is the batch's, on the device). Empty
  /// optional: closed and every row popped, or cancelled.
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
        if (may_pop_locked(closed_ && filling_ == 0 && unresolved == 0)) break;
        if (closed_ && filling_ == 0 && popping_ == 0 && unresolved == 0) {
          if (popped_ != pushed_) throw miscount();
          return std::nullopt;
        }
        wait_locked(lk, s);
      }
      const bool all_counted = closed_ && filling_ == 0 && unresolved == 0;
      // (partial_batches may pop rows of a call not counted yet: then popped_ > pushed_)
      const unsigned long long known = pushed_ > popped_ ? pushed_ - popped_ : 0;
      ++stats_.fill_samples;
      stats_.fill_sum += known;
      stats_.fill_max = std::max(stats_.fill_max, static_cast<std::uint64_t>(known));
      for (auto& p : producers_)
        if (p->st == state::published) {
          after.push_back(p->ev);
          if (!oldest || p->index < oldest->index) oldest = p.get();
        }
      if (!oldest) oldest = last_;  // something was published: it is resolved if none is pending
      r = take_locked(consumers_, free_consumers_, sizeof(ring_ticket));
      r->stamp_of = oldest;
      r->after_all_counted = all_counted;
      r->counted_at_pop = pushed_;
      if (oldest) ++oldest->pins;
      *static_cast<ring_ticket*>(r->pinned) = ring_ticket{ring_status::empty, 0, 0};  // as for the producers' counts
      r->st = state::reading;
      ++popping_;
    }
    // On a throw the record stays out of use: the pop op may be enqueued (it
    // reports a launch error after the launch), and its rows are the failed run's.
    for (event e : after) b_.wait(s.native(), e);
    // full_batches: exactly a batch, but the rest once every call is counted.
    const std::uint32_t at_least = full && !r->after_all_counted ? batch_ : 1;
    row_ring_ops<B>::pop(b_, ctl_, batch_, at_least, static_cast<ring_ticket*>(r->device), s.native());
    r->item.push_ = {};
    r->item.batch_ = row_batch<Row, Elem>{static_cast<const Row*>(data_), static_cast<const Elem*>(payload_), width_,
                                          cap_, static_cast<const ring_ticket*>(r->device)};
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
  /// Rows in and out, batches and fill, as counted so far.
  [[nodiscard]] row_queue_stats stats() const {
    std::lock_guard lk(m_);
    row_queue_stats st = stats_;
    st.rows_in = pushed_;
    st.rows_out = popped_;
    return st;
  }
  [[nodiscard]] row_sizes sizes() const noexcept { return {bound_, batch_, width_}; }

 private:
  static constexpr bool has_payload = !std::is_void_v<Elem>;
  static constexpr bool full = std::is_same_v<Fill, full_batches>;

  static std::size_t checked(std::size_t capacity, const row_sizes& z) {
    const std::string who = "dflash::device_queue_link<\"" + std::string(Name.view()) + "\">";
    ring_control::check_capacity(capacity, who + " (its capacity, in rows)");
    // The newest counted call's record stays with the batches after it (their
    // flow stamp), and records are no more than the capacity: a producer needs a second.
    if (capacity < 2)
      throw std::invalid_argument(who + ": capacity must be at least 2 (got " + std::to_string(capacity) +
                                  "): the newest counted call's record stays in use, and a producer needs a second");
    constexpr std::size_t most = 0xFFFFFFFFu;  // counts are 32-bit on the device (ring_ticket)
    if (z.max_per_push < 1 || z.max_per_push > most)
      throw std::invalid_argument(who + ": MaxRowsPerPush (shape.rows.max_per_push) must be between 1 and 2^32 - 1 (got " +
                                  std::to_string(z.max_per_push) + ")");
    if (z.batch < 1 || z.batch > most)
      throw std::invalid_argument(who + ": BatchRows (shape.rows.batch) must be between 1 and 2^32 - 1 (got " +
                                  std::to_string(z.batch) + ")");
    if (capacity < z.max_per_push)
      throw std::invalid_argument(who + ": capacity " + std::to_string(capacity) + " is below MaxRowsPerPush " +
                                  std::to_string(z.max_per_push) + " (one call's rows must fit the ring)");
    // With full_batches the consumers wait for a whole batch while producers
    // wait for room for a whole call: fewer rows than both would stop both.
    if (full && capacity < z.batch + z.max_per_push - 1)
      throw std::invalid_argument(who + ": capacity " + std::to_string(capacity) +
                                  " is below BatchRows + MaxRowsPerPush - 1 = " +
                                  std::to_string(z.batch + z.max_per_push - 1) +
                                  " (with full_batches a pop waits for a whole batch and a producer for room for a "
                                  "whole call: a smaller ring could stop both)");
    if (has_payload && (z.width < 1 || z.width > most))
      throw std::invalid_argument(who + ": its rows carry a payload (device_rows<Row, B, Elem>): shape.rows.width, "
                                        "the payload's elements per row, must be between 1 and 2^32 - 1 (got " +
                                  std::to_string(z.width) + ")");
    if (!has_payload && z.width != 0)
      throw std::invalid_argument(who + ": its rows carry no payload (device_rows<Row, B>), so shape.rows.width must be 0 "
                                        "(got " + std::to_string(z.width) + ")");
    return capacity;
  }

  // Whether a pop may be issued now (the header's rule for Fill).
  bool may_pop_locked(bool all_counted) const noexcept {
    const long long in_flight = static_cast<long long>(batch_) * static_cast<long long>(popping_);
    if constexpr (!full) {
      return static_cast<long long>(published_) - static_cast<long long>(popped_) - in_flight > 0;
    } else {
      const long long counted = static_cast<long long>(pushed_) - static_cast<long long>(popped_) - in_flight;
      if (all_counted) return counted > 0;  // the rest
      return counted >= static_cast<long long>(batch_) && pushed_ != stalled_at_;
    }
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
    try {
      r->ev = b_.create_event(false);
      r->device = b_.allocate(bytes, setup_);
      r->pinned = b_.allocate_host(bytes);
      // The allocation is ordered on the setup stream; the calls' streams use it
      // next, so the setup stream's work is done first (rare: pools grow to the peak).
      b_.synchronize(setup_);
    } catch (...) {  // a failed call gives back what the earlier ones made
      free_record(*r);
      throw;
    }
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
      const unsigned long long n = word & ~failed_bit;
      if (n > bound_ && !error_)
        error_ = std::make_exception_ptr(std::runtime_error(
            "dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: a producer call pushed " +
            std::to_string(n) + " rows, more than MaxRowsPerPush = " + std::to_string(bound_) +
            "; the link reserved room for " + std::to_string(bound_) + ", so rows past it may have been lost"));
      if ((word & failed_bit) && !error_)
        error_ = std::make_exception_ptr(std::runtime_error(
            "dflash::device_queue_link<\"" + std::string(Name.view()) + "\">: a push of a producer call (" +
            std::to_string(n) + " rows asked) did not fit the ring; its rows are lost"));
      const unsigned long long counted = std::min<unsigned long long>(n, bound_);
      reserved_ -= bound_ - counted;
      published_ -= bound_ - counted;
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
      ++stats_.batches;
      if (tk.count > 0 && tk.count < batch_) ++stats_.short_batches;
      if (tk.count == 0) ++stats_.empty_batches;
      if (full && tk.count == 0 && !c->after_all_counted) stalled_at_ = c->counted_at_pop;
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
    reserved_ -= bound_;
    --filling_;
    r->st = state::idle;
    free_producers_.push_back(r);
    cv_.notify_all();
  }
  // A record's event and memory, whichever exist; a failing free loses only
  // what it could not free (the device's error was reported where it happened).
  void free_record(record& r) noexcept {
    if (r.ev != event{}) b_.destroy_event(r.ev);
    try {
      b_.deallocate(r.device, setup_);
    } catch (...) {
    }
    b_.deallocate_host(r.pinned);
  }
  void quiet_wait(event e) noexcept { detail::quiet_host_wait(b_, e); }
  void free_storage() noexcept {
    try {
      b_.deallocate(payload_, setup_);
      b_.deallocate(data_, setup_);
      b_.deallocate(seq_, setup_);
      b_.deallocate(header_, setup_);
      b_.synchronize(setup_);
    } catch (...) {
    }
    b_.destroy_stream(setup_);
  }

  static constexpr unsigned long long failed_bit = row_pusher<Row, Elem>::failed_bit;

  B& b_;
  const std::size_t cap_;
  const std::uint32_t bound_, batch_, width_;
  [[no_unique_address]] profiler_ref<P> prof_;
  typename B::stream_type setup_{};
  void* header_ = nullptr;
  void* seq_ = nullptr;
  void* data_ = nullptr;
  void* payload_ = nullptr;
  ring_control ctl_;

  mutable std::mutex m_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<record>> producers_, consumers_;
  std::vector<record*> free_producers_, free_consumers_;
  std::exception_ptr error_;
  unsigned long long reserved_ = 0;   // every call so far: its count, or the bound while unknown
  unsigned long long published_ = 0;  // the published calls among them
  unsigned long long pushed_ = 0;     // counted rows of resolved calls
  unsigned long long popped_ = 0;     // rows of completed pops
  unsigned long long freed_ = 0;      // positions [0, freed_) released
  std::map<unsigned long long, unsigned long long> released_;  // released runs above freed_: first -> count
  std::size_t filling_ = 0, popping_ = 0;
  // full_batches: pushed_ when a pop that came back empty was issued: the
  // call whose unwritten rows stopped it was not counted yet, so no pop
  // follows until a count rises (its count, as it completes).
  unsigned long long stalled_at_ = ~0ull;
  row_queue_stats stats_;
  record* last_ = nullptr;  // the newest resolved producer call (pinned while it is)
  bool closed_ = false, cancelled_ = false;
  bool seen_empty_ = false;  // a pop issued once every count was known found no row
};

}  // namespace dflash
