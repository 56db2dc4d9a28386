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
// or pop that does not wait is one CAS plus a release store, no lock and no
// fence. A push or pop that must wait spins briefly, yields a few times, then
// parks on a condition variable; the other side takes the mutex and notifies
// only when someone is parked.
//
// The spin adapts per side: it lengthens when waits end while spinning (the
// other side runs on another core) and shrinks to a few pauses when they do
// not. With more threads than cores the other side is usually not running,
// and a fixed spin would burn the very core it needs; yielding hands that core
// over without a futex round trip, and parking bounds what an idle wait costs.
//
// "Someone is parked" is a bit inside the very word the other side CASes to
// claim a position (pop-parked in the push index, push-parked in the pop
// index). A parker sets it with an atomic RMW, so it lands in that word's
// single modification order: a claim that comes later sees the bit and wakes
// after it publishes, and a claim that came earlier is visible to the parker,
// which then spins for that imminent publish instead of sleeping. So a wake-up
// is never lost, and neither side needs a StoreLoad fence (a fence-based
// scheme would pay a membarrier syscall — IPIs to every core — on each park).

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

#include "dflash/detail/capacity.hpp"
#include "dflash/detail/deadline.hpp"
#include "dflash/detail/spin.hpp"
#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/queue/queue_keys.hpp"

namespace dflash {


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
        slots_(std::make_unique<slot[]>(capacity)), prof_(prof) {
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

  /// Never blocks: ok, full or closed. "full" means no slot is free at this
  /// instant, which includes a slot whose pop has claimed it but not yet
  /// finished moving the item out: try_push can report full while size() <
  /// capacity(). A caller that knows room exists (at most capacity items ever
  /// in flight) must use push(), which waits for that pop to finish.
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

  /// An item its producer handed to the consumer stage directly (a pipeline's
  /// help-first call, pipeline/agents/host_worker.hpp) instead of through the
  /// ring: recorded as a push and a pop that did not wait, so the keys count
  /// every item that crossed this link either way.
  void record_handover() const {
    record_zero(push_wait_key<Name>{});
    record_zero(pop_wait_key<Name>{});
  }

  /// An item its consumer took with try_pop (which records nothing) where a
  /// pipeline would have popped it: recorded as a pop that did not wait.
  void record_pop() const { record_zero(pop_wait_key<Name>{}); }

  /// Idempotent. Wakes every blocked push (fails) and pop (drains, then empty).
  void close() noexcept {
    enq_.fetch_or(closed_bit, std::memory_order_acq_rel);
    {
      const std::lock_guard lk(m_);  // a parker checks closed() under m_ before it waits
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }

  /// The largest capacity the position encoding serves (detail/capacity.hpp).
  static constexpr std::size_t max_capacity = detail::max_ring_capacity;

  [[nodiscard]] bool closed() const noexcept { return (enq_.load(std::memory_order_acquire) & closed_bit) != 0; }
  /// Items in the queue (reserved pushes minus reserved pops; exact when quiescent).
  [[nodiscard]] std::size_t size() const noexcept {
    const std::uint64_t d = deq_.load(std::memory_order_acquire) & pos_mask;
    const std::uint64_t e = enq_.load(std::memory_order_acquire) & pos_mask;
    return e > d ? static_cast<std::size_t>(std::min<std::uint64_t>(e - d, cap_)) : 0;
  }
  [[nodiscard]] bool empty() const noexcept { return size() == 0; }
  /// Pushes that claimed a position so far: every item that entered, plus any
  /// pending publish (a pipeline compares it with the items its consumers took).
  [[nodiscard]] std::uint64_t pushes() const noexcept { return enq_.load(std::memory_order_acquire) & pos_mask; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  /// Threads blocked (spinning or parked) in push()/push_for() now (for tests and diagnostics).
  [[nodiscard]] std::size_t blocked_pushers() const noexcept { return blocked_push_.load(std::memory_order_acquire); }
  /// Threads blocked in pop()/pop_for() now.
  [[nodiscard]] std::size_t blocked_poppers() const noexcept { return blocked_pop_.load(std::memory_order_acquire); }
  /// Pause rounds the next blocking push / pop spins before it yields: doubled (up to
  /// max_spin) when a wait ends while spinning, halved (down to min_spin) when it does not.
  static constexpr int min_spin = 4, max_spin = 128;
  [[nodiscard]] int push_spin() const noexcept { return push_spin_.load(std::memory_order_relaxed); }
  [[nodiscard]] int pop_spin() const noexcept { return pop_spin_.load(std::memory_order_relaxed); }

 private:
  using time_point = std::chrono::steady_clock::time_point;
  // enq_ = push position | closed_bit | pop_parked_bit; deq_ = pop position | push_parked_bit.
  static constexpr std::uint64_t closed_bit = std::uint64_t{1} << 63;
  static constexpr std::uint64_t pop_parked_bit = std::uint64_t{1} << 62;   // in enq_
  static constexpr std::uint64_t push_parked_bit = std::uint64_t{1} << 63;  // in deq_
  static constexpr std::uint64_t pos_mask = (std::uint64_t{1} << 62) - 1;
  // The adaptive spin's start (see the header comment), and yields before parking.
  static constexpr int initial_spin = 32, yield_rounds = 4;

  // seq == 2*pos: free for the push of position pos; 2*pos+1: holds its item;
  // 2*(pos+capacity): popped, free for the next lap (see ring_control).
  struct slot {
    std::atomic<std::uint64_t> seq{0};
    std::optional<T> value;  // empty only if a throwing constructor was published
  };

  static std::size_t checked(std::size_t capacity) {
    detail::check_capacity(capacity, "dflash::bounded_queue '" + std::string(Name.view()) + "'");
    return capacity;
  }

  slot& at(std::uint64_t pos) const noexcept {
    return slots_[mask_ ? (pos & mask_) : (pos % cap_)];  // no division for power-of-two capacities
  }
  static std::int64_t diff(std::uint64_t a, std::uint64_t b) noexcept { return static_cast<std::int64_t>(a - b); }

  // `locked`: the caller holds m_ (a parker's check), so a wake-up must not lock it again.
  // On `full`, *in_flight tells whether the pop that frees the blocking slot has
  // already claimed it (its release, and so our room, is imminent).
  template <class U>
  queue_status try_enqueue(U&& v, bool locked = false, bool* in_flight = nullptr) {
    std::uint64_t word = enq_.load(std::memory_order_relaxed);
    for (;;) {
      if (word & closed_bit) return queue_status::closed;
      const std::uint64_t pos = word & pos_mask;
      slot& s = at(pos);
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos);
      if (d == 0) {
        // The CAS reads the parked bit in the same RMW that claims pos.
        if (enq_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
          fill(s, pos, std::forward<U>(v), locked, (word & pop_parked_bit) != 0);
          return queue_status::ok;
        }
      } else if (d < 0) {  // the slot still holds last lap's item: full, unless word is stale
        const std::uint64_t now = enq_.load(std::memory_order_relaxed);
        if (now == word) {
          // Read after a parker's bit-setting RMW, so a pop claiming pos - cap later sees the bit.
          if (in_flight) *in_flight = (deq_.load(std::memory_order_relaxed) & pos_mask) + cap_ > pos;
          return queue_status::full;
        }
        word = now;
      } else {
        word = enq_.load(std::memory_order_relaxed);
      }
    }
  }

  template <class U>
  void fill(slot& s, std::uint64_t pos, U&& v, bool locked, bool wake_poppers) {
    struct publish {  // runs even if T's constructor throws, so the ring never stalls
      bounded_queue* q;
      slot& s;
      std::uint64_t pos;
      bool locked, wake;
      ~publish() {
        s.seq.store(2 * pos + 1, std::memory_order_release);
        if (wake) [[unlikely]]
          q->wake(q->not_empty_, q->enq_, pop_parked_bit, locked);
      }
    } guard{this, s, pos, locked, wake_poppers};
    s.value.emplace(std::forward<U>(v));
  }

  struct dequeued {
    std::optional<T> value;
    bool drained = false;    ///< closed and nothing left (only meaningful when value is empty)
    bool in_flight = false;  ///< empty, but a push has claimed the position: its publish is imminent
  };

  dequeued try_dequeue(bool locked = false) {
    std::uint64_t word = deq_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t pos = word & pos_mask;
      slot& s = at(pos);
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos + 1);
      if (d == 0) {
        if (deq_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed, std::memory_order_relaxed)) {
          dequeued out;
          take(s, pos, out.value, locked, (word & push_parked_bit) != 0);
          if (out.value) return out;
          word = deq_.load(std::memory_order_relaxed);  // a failed push's empty slot: skip it
        }
      } else if (d < 0) {  // nothing published at pos (yet)
        const std::uint64_t e = enq_.load(std::memory_order_acquire);
        const std::uint64_t now = deq_.load(std::memory_order_relaxed);
        if (now == word) {
          dequeued out;
          out.drained = (e & closed_bit) != 0 && (e & pos_mask) == pos;
          out.in_flight = (e & pos_mask) > pos;
          return out;
        }
        word = now;
      } else {
        word = deq_.load(std::memory_order_relaxed);
      }
    }
  }

  void take(slot& s, std::uint64_t pos, std::optional<T>& out, bool locked, bool wake_pushers) {
    struct release {  // hands the slot to the next lap even if T's move throws
      bounded_queue* q;
      slot& s;
      std::uint64_t pos;
      bool locked, wake;
      ~release() {
        s.value.reset();
        s.seq.store(2 * (pos + q->cap_), std::memory_order_release);
        if (wake) [[unlikely]]
          q->wake(q->not_full_, q->deq_, push_parked_bit, locked);
      }
    } guard{this, s, pos, locked, wake_pushers};
    if (s.value) out.emplace(std::move(*s.value));
  }

  // Wakes every parker of one side and clears its bit; those that still cannot
  // proceed set it again before they sleep. Both happen under m_, and a parker
  // holds m_ from setting the bit until it waits, so every parker that set the
  // bit is waiting once we hold m_. The notify comes after unlocking, so the
  // woken thread does not wake into a held mutex.
  void wake(std::condition_variable& cv, std::atomic<std::uint64_t>& word, std::uint64_t bit, bool locked) {
    if (locked) {
      word.fetch_and(~bit, std::memory_order_relaxed);
    } else {
      const std::lock_guard lk(m_);
      word.fetch_and(~bit, std::memory_order_relaxed);
    }
    cv.notify_all();
  }

  template <class K>
  void record_zero(K k) const {
    if constexpr (P::enabled) prof_->add(k, typename P::duration{0});
  }

  // Whether the slot `ahead` places past this side's position has turned:
  // free for a push (turn 0), or holding an item for a pop (turn 1); also true
  // once another waiter of this side passed it, which a full attempt then
  // sees. The spin polls this rather than attempting: a failed attempt reads
  // the other side's index word (a pop for drained and in-flight, a push for
  // in-flight), the word that side CASes for every item, and so took its
  // cache line away from it on each poll. With producer and consumer on
  // different cores that cut 1P1C throughput to well under half; the slot's
  // line changes hands once per item anyway.
  bool turned(std::uint64_t own_word, std::uint64_t turn, std::uint64_t ahead = 0) const noexcept {
    const std::uint64_t pos = (own_word & pos_mask) + ahead;
    return diff(at(pos).seq.load(std::memory_order_relaxed), 2 * pos + turn) >= 0;
  }

  // A push that found the ring full waits, for the first half of its spin,
  // until the slot a quarter of the ring ahead is free, rather than the next
  // one: it then fills lines the consumer has left, where one slot at a time
  // it would take back the line the consumer is working in, item after item
  // (on different cores, 1P1C throughput more than doubles). The second half
  // takes any room, so a slow consumer adds at most half a spin. A closed
  // queue ends the wait at once (enq_ carries the bit). Pops take an item as
  // soon as there is one: waiting for more would only add latency, and deq_
  // does not carry the closed bit, so a pop sees a close at its first yield.
  bool room_ready(bool patient) const noexcept {
    const std::uint64_t word = enq_.load(std::memory_order_relaxed);
    return (word & closed_bit) != 0 || turned(word, 0, patient ? cap_ / 4 : 0);
  }
  bool item_ready() const noexcept { return turned(deq_.load(std::memory_order_relaxed), 1); }

  // Blocking paths. `attempt(locked, in_flight)` returns true when done
  // (success, closed, ...); otherwise it sets in_flight when the other side has
  // claimed the position we wait for. `ready(patient)` is the spin's cheap
  // poll (room_ready(), item_ready()); `patient` holds for the first half of
  // the spin. Spins a little, then parks on `cv` (advertised by `bit` in
  // `word`) until `attempt` succeeds or the deadline passes. Returns false on
  // timeout.
  template <class Attempt, class Ready>
  bool wait_for(Attempt&& attempt, Ready&& ready, std::atomic<std::uint64_t>& word, std::uint64_t bit,
                std::uint32_t& parked, std::condition_variable& cv, std::atomic<int>& spin,
                const time_point* deadline) {
    bool in_flight = false;
    // A heuristic shared by this side's waiters: relaxed, a lost update only mistunes one wait.
    const int budget = spin.load(std::memory_order_relaxed);
    for (int i = 0; i < budget; ++i) {
      detail::cpu_relax();
      if (!ready(i < budget / 2)) continue;
      if (attempt(false, in_flight)) {
        if (budget < max_spin) spin.store(std::min(max_spin, 2 * budget), std::memory_order_relaxed);
        return true;
      }
    }
    if (budget > min_spin) spin.store(std::max(min_spin, budget / 2), std::memory_order_relaxed);
    for (int i = 0; i < yield_rounds; ++i) {
      std::this_thread::yield();
      if (attempt(false, in_flight)) return true;
    }
    std::unique_lock lk(m_);
    struct parked_guard {  // also when T's constructor or move throws inside attempt()
      std::unique_lock<std::mutex>& lk;
      std::uint32_t& parked;
      std::atomic<std::uint64_t>& word;
      std::uint64_t bit;
      ~parked_guard() {
        if (!lk.owns_lock()) lk.lock();
        if (--parked == 0) word.fetch_and(~bit, std::memory_order_relaxed);  // spare the other side a needless wake
      }
    } guard{lk, ++parked, word, bit};
    for (int imminent = 0;; ++imminent) {
      word.fetch_or(bit, std::memory_order_relaxed);  // before the check below: see the header comment
      if (attempt(true, in_flight)) return true;
      if (in_flight) {
        // The other side claimed our position before our bit: its publish is
        // imminent but will not wake us, so we poll (a slow T constructor can
        // make "imminent" long: yield, then sleep, and keep the deadline).
        if (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline) return false;
        lk.unlock();
        if (imminent < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
        lk.lock();
        continue;
      }
      if (deadline == nullptr) {
        cv.wait(lk);
      } else if (cv.wait_until(lk, *deadline) == std::cv_status::timeout) {
        return attempt(true, in_flight);
      }
    }
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
    const blocked_scope<push_wait_key<Name>> b(*this, blocked_push_);
    const bool done = wait_for(
        [&](bool locked, bool& in_flight) {
          st = try_enqueue(std::forward<U>(v), locked, &in_flight);
          return st != queue_status::full;
        },
        [this](bool patient) { return room_ready(patient); }, deq_, push_parked_bit, parked_push_, not_full_,
        push_spin_, deadline);
    return done ? st : queue_status::timeout;
  }

  std::optional<T> pop_until(const time_point* deadline) {
    dequeued r = try_dequeue();
    if (r.value || r.drained || (deadline != nullptr && std::chrono::steady_clock::now() >= *deadline)) {
      record_zero(pop_wait_key<Name>{});
      return std::move(r.value);
    }
    {
      const blocked_scope<pop_wait_key<Name>> b(*this, blocked_pop_);
      (void)wait_for(
          [&](bool locked, bool& in_flight) {
            r = try_dequeue(locked);
            in_flight = r.in_flight;
            return r.value.has_value() || r.drained;
          },
          [this](bool) { return item_ready(); }, enq_, pop_parked_bit, parked_pop_, not_empty_, pop_spin_,
          deadline);
    }
    return std::move(r.value);
  }

  // A blocking push or pop: counted in blocked_push_/blocked_pop_ and timed
  // under K, until it returns or throws (T's constructor or move).
  template <class K>
  class blocked_scope {
   public:
    blocked_scope(const bounded_queue& q, std::atomic<std::size_t>& n) : q_(q), n_(n), tok_(q.begin_wait(K{})) {
      n_.fetch_add(1, std::memory_order_acq_rel);
    }
    blocked_scope(const blocked_scope&) = delete;
    blocked_scope& operator=(const blocked_scope&) = delete;
    ~blocked_scope() {
      n_.fetch_sub(1, std::memory_order_acq_rel);
      q_.end_wait(K{}, tok_);
    }

   private:
    const bounded_queue& q_;
    std::atomic<std::size_t>& n_;
    decltype(std::declval<const bounded_queue&>().begin_wait(K{})) tok_;
  };

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
  [[no_unique_address]] profiler_ref<P> prof_;
  [[maybe_unused]] pad pad0_{};
  std::atomic<std::uint64_t> enq_{0};  // next push position | closed_bit | pop_parked_bit
  [[maybe_unused]] pad pad1_{};
  std::atomic<std::uint64_t> deq_{0};  // next pop position | push_parked_bit
  [[maybe_unused]] pad pad2_{};
  std::uint32_t parked_push_ = 0, parked_pop_ = 0;  // under m_
  std::atomic<std::size_t> blocked_push_{0}, blocked_pop_{0};
  std::atomic<int> push_spin_{initial_spin}, pop_spin_{initial_spin};  // adaptive spin budgets, touched only when waiting
  std::mutex m_;  // parking only; never taken on a fast path with nobody parked
  std::condition_variable not_full_, not_empty_;
};

}  // namespace dflash
