#pragma once
// bounded_queue: a bounded MPMC blocking queue for host threads.
//
//   dflash::bounded_queue<Batch> q(60);               // NullProfiler: records nothing
//   if (!q.push(b)) { /* closed: b was not consumed */ }
//   while (auto b = q.pop()) use(*b);                 // empty optional = closed and drained
//
//   using P = dflash::AccumulatingProfiler<dflash::queue_keys<"hs_queue">>;
//   dflash::bounded_queue<Batch, P, "hs_queue"> hq(60, prof);  // records hs_queue.push_wait / .pop_wait
//
// close() wakes every waiter: pops drain what is left and then return empty,
// pushes fail (false / queue_status::closed) and leave their argument intact.
// With a stateful profiler every blocking push/pop records its wait time (zero
// when it did not block; the clock is read only when it does); with an
// empty policy nothing is recorded and no clock is read.
//
// How: a bounded MPMC ring of `capacity` slots (Vyukov's per-slot sequence
// scheme, positions doubled as in ring_control so capacity 1 works) — a push
// or pop that does not wait is one CAS plus a release store, no lock. A push
// or pop that must wait spins briefly, then parks on a condition variable;
// the other side takes the mutex and notifies only when someone is parked.
// "Someone is parked" is a counter the parker raises before its last check;
// the StoreLoad ordering between that and the other side's publish comes from
// an asymmetric barrier (membarrier on the parking side, a compiler barrier on
// the fast path), so a wake-up is never lost and the fast path has no fence.

#include <algorithm>
#include <bit>
#include <chrono>
#include <atomic>
#include <concepts>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <thread>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dflash/profile/asymmetric_barrier.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {

namespace detail {
/// steady_clock::now() + timeout, saturated at time_point::max() ("forever")
/// instead of overflowing; zero or negative = now. The comparison runs in
/// long double, so hours::max() or an infinite duration<double> cannot
/// overflow on the way. A NaN timeout is the caller's bug and throws.
template <class Rep, class Period>
std::chrono::steady_clock::time_point saturating_deadline(std::chrono::duration<Rep, Period> timeout,
                                                          std::string_view who) {
  using sc = std::chrono::steady_clock;
  using ld = std::chrono::duration<long double, std::nano>;
  const auto now = sc::now();
  const ld t = std::chrono::duration_cast<ld>(timeout);
  if (t.count() != t.count()) throw std::invalid_argument(std::string(who) + ": timeout is NaN");
  if (!(t.count() > 0)) return now;
  const ld room = std::chrono::duration_cast<ld>(sc::time_point::max() - now);
  if (t >= room) return sc::time_point::max();
  return now + std::chrono::ceil<sc::duration>(t);
}
}  // namespace detail

/// Outcome of a push that can fail for more than one reason.
enum class queue_status : std::uint8_t {
  ok,       ///< the item is in the queue
  full,     ///< try_push: no room right now
  timeout,  ///< push_for: no room before the deadline
  closed,   ///< the queue is closed; the item was not taken
};

template <class T, ProfilerPolicy P = NullProfiler, fixed_string Name = "queue">
class bounded_queue {
 public:
  using value_type = T;
  using profiler_type = P;
  using keys = queue_keys<Name>;  ///< what this queue records when P is stateful
  static constexpr auto name = Name;

  /// For empty (stateless) policies such as NullProfiler.
  explicit bounded_queue(std::size_t capacity)
    requires std::is_empty_v<P>
      : bounded_queue(capacity, P{}) {}

  /// `prof` must outlive the queue.
  bounded_queue(std::size_t capacity, const P& prof)
      : cap_(checked(capacity)), mask_(std::has_single_bit(capacity) ? capacity - 1 : 0),
        slots_(std::make_unique<slot[]>(capacity)), asymmetric_(detail::asymmetric_barrier_state::fast()),
        prof_(prof) {
    for (std::size_t i = 0; i < capacity; ++i) slots_[i].seq.store(2 * i, std::memory_order_relaxed);
  }

  bounded_queue(const bounded_queue&) = delete;
  bounded_queue& operator=(const bounded_queue&) = delete;

  /// Blocks while full. false = closed (the argument is left untouched).
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] bool push(U&& v) {
    return push_until(std::forward<U>(v), nullptr) == queue_status::ok;
  }

  /// Never blocks: ok, full or closed.
  template <class U>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status try_push(U&& v) {
    return try_enqueue(std::forward<U>(v));
  }

  /// Blocks at most `timeout` while full: ok, timeout or closed.
  template <class U, class Rep, class Period>
    requires std::constructible_from<T, U&&>
  [[nodiscard]] queue_status push_for(U&& v, std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::push_for");
    return push_until(std::forward<U>(v), &deadline);
  }

  /// Blocks while empty. Empty optional = closed and nothing left.
  [[nodiscard]] std::optional<T> pop() { return pop_until(nullptr); }

  /// Never blocks. Empty optional = nothing available right now (see closed()).
  [[nodiscard]] std::optional<T> try_pop() { return try_dequeue().value; }

  /// Blocks at most `timeout`. Empty optional = timed out, or closed and drained.
  template <class Rep, class Period>
  [[nodiscard]] std::optional<T> pop_for(std::chrono::duration<Rep, Period> timeout) {
    const auto deadline = detail::saturating_deadline(timeout, "dflash::bounded_queue::pop_for");
    return pop_until(&deadline);
  }

  /// Idempotent. Wakes every blocked push (fails) and pop (drains, then empty).
  void close() noexcept {
    enq_.fetch_or(closed_bit, std::memory_order_acq_rel);
    {
      std::lock_guard lk(m_);  // a parker checks closed() under m_ before it waits
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  [[nodiscard]] bool closed() const noexcept { return (enq_.load(std::memory_order_acquire) & closed_bit) != 0; }
  /// Items in the queue (reserved pushes minus reserved pops; exact when quiescent).
  [[nodiscard]] std::size_t size() const noexcept {
    const std::uint64_t d = deq_.load(std::memory_order_acquire);
    const std::uint64_t e = enq_.load(std::memory_order_acquire) & ~closed_bit;
    return e > d ? static_cast<std::size_t>(std::min<std::uint64_t>(e - d, cap_)) : 0;
  }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  /// Threads blocked (spinning or parked) in push()/push_for() now (for tests and diagnostics).
  [[nodiscard]] std::size_t blocked_pushers() const noexcept { return blocked_push_.load(std::memory_order_acquire); }
  /// Threads blocked in pop()/pop_for() now.
  [[nodiscard]] std::size_t blocked_poppers() const noexcept { return blocked_pop_.load(std::memory_order_acquire); }

 private:
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr std::uint64_t closed_bit = std::uint64_t{1} << 63;
  static constexpr int spin_rounds = 64;

  // seq == 2*pos: free for the push of position pos; 2*pos+1: holds its item;
  // 2*(pos+capacity): popped, free for the next lap (see ring_control).
  struct slot {
    std::atomic<std::uint64_t> seq{0};
    std::optional<T> value;  // empty only if a throwing constructor was published
  };

  static std::size_t checked(std::size_t capacity) {
    if (capacity == 0)
      throw std::invalid_argument("dflash::bounded_queue '" + std::string(Name.view()) +
                                  "': capacity must be at least 1 (got 0)");
    if (capacity > (std::size_t{1} << 61))
      throw std::invalid_argument("dflash::bounded_queue '" + std::string(Name.view()) +
                                  "': capacity must be at most 2^61 (got " + std::to_string(capacity) + ")");
    return capacity;
  }

  slot& at(std::uint64_t pos) const noexcept {
    return slots_[mask_ ? (pos & mask_) : (pos % cap_)];  // no division for power-of-two capacities
  }
  static std::int64_t diff(std::uint64_t a, std::uint64_t b) noexcept { return static_cast<std::int64_t>(a - b); }

  static void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    std::this_thread::yield();
#endif
  }

  // Fast-path side of the asymmetric barrier (see the header comment).
  void light_barrier() const noexcept {
    if (asymmetric_) [[likely]]
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      detail::full_fence();
  }

  // `locked`: the caller holds m_ (a parker's check), so a wake-up must not lock it again.
  template <class U>
  queue_status try_enqueue(U&& v, bool locked = false) {
    std::uint64_t pos = enq_.load(std::memory_order_relaxed);
    for (;;) {
      if (pos & closed_bit) return queue_status::closed;
      slot& s = at(pos);
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos);
      if (d == 0) {
        if (enq_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
          fill(s, pos, std::forward<U>(v), locked);
          return queue_status::ok;
        }
      } else if (d < 0) {  // the slot still holds last lap's item: full, unless pos is stale
        const std::uint64_t now = enq_.load(std::memory_order_relaxed);
        if (now == pos) return queue_status::full;
        pos = now;
      } else {
        pos = enq_.load(std::memory_order_relaxed);
      }
    }
  }

  template <class U>
  void fill(slot& s, std::uint64_t pos, U&& v, bool locked) {
    struct publish {  // runs even if T's constructor throws, so the ring never stalls
      bounded_queue* q;
      slot& s;
      std::uint64_t pos;
      bool locked;
      ~publish() {
        s.seq.store(2 * pos + 1, std::memory_order_release);
        q->light_barrier();
        if (q->parked_pop_.load(std::memory_order_relaxed) != 0) q->wake(q->not_empty_, locked);
      }
    } guard{this, s, pos, locked};
    s.value.emplace(std::forward<U>(v));
  }

  struct dequeued {
    std::optional<T> value;
    bool drained = false;  ///< closed and nothing left (only meaningful when value is empty)
  };

  dequeued try_dequeue(bool locked = false) {
    std::uint64_t pos = deq_.load(std::memory_order_relaxed);
    for (;;) {
      slot& s = at(pos);
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos + 1);
      if (d == 0) {
        if (deq_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
          dequeued out;
          take(s, pos, out.value, locked);
          if (out.value) return out;
          pos = deq_.load(std::memory_order_relaxed);  // a failed push's empty slot: skip it
        }
      } else if (d < 0) {  // nothing published at pos (yet)
        const std::uint64_t e = enq_.load(std::memory_order_acquire);
        const std::uint64_t now = deq_.load(std::memory_order_relaxed);
        if (now == pos) return {std::nullopt, (e & closed_bit) != 0 && (e & ~closed_bit) == pos};
        pos = now;
      } else {
        pos = deq_.load(std::memory_order_relaxed);
      }
    }
  }

  void take(slot& s, std::uint64_t pos, std::optional<T>& out, bool locked) {
    struct release {  // hands the slot to the next lap even if T's move throws
      bounded_queue* q;
      slot& s;
      std::uint64_t pos;
      bool locked;
      ~release() {
        s.value.reset();
        s.seq.store(2 * (pos + q->cap_), std::memory_order_release);
        q->light_barrier();
        if (q->parked_push_.load(std::memory_order_relaxed) != 0) q->wake(q->not_full_, locked);
      }
    } guard{this, s, pos, locked};
    if (s.value) out.emplace(std::move(*s.value));
  }

  // A parker holds m_ from its last check until it waits, so taking m_ once
  // (or already holding it) guarantees the notify cannot fall in between.
  void wake(std::condition_variable& cv, bool locked) {
    if (!locked) {
      std::lock_guard lk(m_);
    }
    cv.notify_one();
  }

  template <class K>
  void record_zero(K k) const {
    if constexpr (P::enabled) prof_->add(k, typename P::duration{0});
  }

  // Blocking paths. `attempt(locked)` returns true when done (success, closed, ...).
  // Spins a little, then parks on `cv` counted in `parked` until `attempt`
  // succeeds or the deadline passes. Returns false on timeout.
  template <class Attempt>
  bool wait_for(Attempt&& attempt, std::atomic<std::uint32_t>& parked, std::condition_variable& cv,
                const time_point* deadline) {
    for (int i = 0; i < spin_rounds; ++i) {
      cpu_relax();
      if (attempt(false)) return true;
    }
    for (int i = 0; i < 4; ++i) {
      std::this_thread::yield();
      if (attempt(false)) return true;
    }
    std::unique_lock lk(m_);
    parked.fetch_add(1, std::memory_order_relaxed);
    detail::heavy_barrier();  // our count is visible to any publish our next check misses
    bool done = false;
    for (;;) {
      if (attempt(true)) {
        done = true;
        break;
      }
      if (deadline == nullptr) {
        cv.wait(lk);
      } else if (cv.wait_until(lk, *deadline) == std::cv_status::timeout) {
        done = attempt(true);
        break;
      }
    }
    parked.fetch_sub(1, std::memory_order_relaxed);
    return done;
  }

  template <class U>
  queue_status push_until(U&& v, const time_point* deadline) {
    queue_status st = try_enqueue(std::forward<U>(v));
    if (st != queue_status::full) {
      record_zero(push_wait_key<Name>{});
      return st;
    }
    if (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline) {
      record_zero(push_wait_key<Name>{});
      return queue_status::timeout;
    }
    auto tok = begin_wait(push_wait_key<Name>{});
    blocked_push_.fetch_add(1, std::memory_order_acq_rel);
    const bool done = wait_for(
        [&](bool locked) {
          st = try_enqueue(std::forward<U>(v), locked);
          return st != queue_status::full;
        },
        parked_push_, not_full_, deadline);
    blocked_push_.fetch_sub(1, std::memory_order_acq_rel);
    end_wait(push_wait_key<Name>{}, tok);
    return done ? st : queue_status::timeout;
  }

  std::optional<T> pop_until(const time_point* deadline) {
    dequeued r = try_dequeue();
    if (r.value || r.drained || (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline)) {
      record_zero(pop_wait_key<Name>{});
      return std::move(r.value);
    }
    auto tok = begin_wait(pop_wait_key<Name>{});
    blocked_pop_.fetch_add(1, std::memory_order_acq_rel);
    (void)wait_for(
        [&](bool locked) {
          r = try_dequeue(locked);
          return r.value.has_value() || r.drained;
        },
        parked_pop_, not_empty_, deadline);
    blocked_pop_.fetch_sub(1, std::memory_order_acq_rel);
    end_wait(pop_wait_key<Name>{}, tok);
    return std::move(r.value);
  }

  template <class K>
  auto begin_wait(K k) const noexcept {
    if constexpr (P::enabled) return prof_->begin(k);
    else return 0;
  }
  template <class K, class Tok>
  void end_wait(K k, const Tok& tok) const {
    if constexpr (P::enabled) prof_->end(k, tok);
  }

  // Explicit padding rather than alignas(64): the words still never share a
  // cache line, and the queue's size stays the plain sum of its members (so a
  // NullProfiler queue is exactly one pointer smaller than a profiled one).
  using pad = char[64 - sizeof(std::uint64_t)];
  const std::size_t cap_;
  const std::size_t mask_;  // cap_ - 1 when cap_ is a power of two, else 0
  std::unique_ptr<slot[]> slots_;
  const bool asymmetric_;
  [[no_unique_address]] profiler_ref<P> prof_;
  [[maybe_unused]] pad pad0_{};
  std::atomic<std::uint64_t> enq_{0};  // next push position | closed_bit
  [[maybe_unused]] pad pad1_{};
  std::atomic<std::uint64_t> deq_{0};  // next pop position
  [[maybe_unused]] pad pad2_{};
  std::atomic<std::uint32_t> parked_push_{0}, parked_pop_{0};
  std::atomic<std::size_t> blocked_push_{0}, blocked_pop_{0};
  std::mutex m_;  // parking only; never taken on a fast path with nobody parked
  std::condition_variable not_full_, not_empty_;
};

}  // namespace dflash
