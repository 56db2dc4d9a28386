#pragma once
// detail::blocking_ring: the half of bounded_queue that does not depend on the
// item type — positions, the per-slot sequence words, the parked bits, the
// adaptive spins and parking. Not a template, so a TU with many queue types
// (each pipeline link is one, per profiler) compiles this once; bounded_queue<T>
// keeps only what touches a T: constructing it into a slot and moving it out.
//
// The ring does not own the slots. bounded_queue lays out `slot { seq; T }`
// in one array, so that a slot's sequence word and its item share a cache line
// (one line changes hands per item), and hands the ring the address of the first
// sequence word and the slot size; the ring reaches slot i's word `stride`
// bytes further on.
//
// Positions are doubled as in ring_control, so capacity 1 works:
//   seq == 2*pos                 free for the push of position pos
//   seq == 2*pos + 1             holds its item
//   seq == 2*(pos + capacity)    popped, free for the next lap
// A push or pop that does not wait is one CAS plus a release store, no lock
// and no fence. One that must wait spins briefly, yields a few times, then
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
#include <atomic>
#include <bit>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <thread>

#include "dflash/detail/capacity.hpp"
#include "dflash/detail/spin.hpp"
#include "dflash/detail/std_chrono.hpp"

namespace dflash {

/// Outcome of a push that can fail for more than one reason.
enum class queue_status : std::uint8_t {
  ok,       ///< the item is in the queue
  full,     ///< try_push: no room right now
  timeout,  ///< push_for: no room before the deadline
  closed,   ///< the queue is closed; the item was not taken
};

namespace detail {

class blocking_ring {
 public:
  using time_point = std::chrono::steady_clock::time_point;
  static constexpr int min_spin = 4, max_spin = 128;

  /// `seq0`: slot 0's sequence word; slot i's lies i * `stride` bytes further.
  blocking_ring(std::size_t capacity, std::atomic<std::uint64_t>* seq0, std::size_t stride) noexcept
      : cap_(capacity), mask_(std::has_single_bit(capacity) ? capacity - 1 : 0),
        seq0_(reinterpret_cast<std::byte*>(seq0)), stride_(stride) {
    for (std::size_t i = 0; i < capacity; ++i) seq_at(i).store(2 * i, std::memory_order_relaxed);
  }
  blocking_ring(const blocking_ring&) = delete;
  blocking_ring& operator=(const blocking_ring&) = delete;

  // ---- claims: the CAS half of a push or pop; the caller moves the item, then publishes / releases ----
  // The claims are member templates on the caller's slot type: the fast path
  // indexes the caller's own array (the address it then fills is computed once,
  // as a typed ring would), and only these few lines are compiled per item type.
  template <class Slot>
  struct push_claim {
    queue_status st;     ///< ok (pos is the caller's), full or closed
    std::uint64_t pos;   ///< with ok
    Slot* slot;          ///< with ok: the slot of pos
    bool wake_poppers;   ///< with ok: pass to publish()
  };
  /// On `full`, *in_flight tells whether the pop that frees the blocking slot has
  /// already claimed it (its release, and so our room, is imminent). `slots` is
  /// the array whose sequence words the ring was given (Slot::seq).
  template <class Slot>
  push_claim<Slot> claim_push(Slot* slots, bool* in_flight) noexcept {
    std::uint64_t word = enq_.load(std::memory_order_relaxed);
    for (;;) {
      if (word & closed_bit) return {queue_status::closed, 0, nullptr, false};
      const std::uint64_t pos = word & pos_mask;
      Slot& s = slots[index(pos)];
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos);
      if (d == 0) {
        // The CAS reads the parked bit in the same RMW that claims pos.
        if (enq_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed, std::memory_order_relaxed))
          return {queue_status::ok, pos, &s, (word & pop_parked_bit) != 0};
      } else if (d < 0) {  // the slot still holds last lap's item: full, unless word is stale
        const std::uint64_t now = enq_.load(std::memory_order_relaxed);
        if (now == word) {
          // Read after a parker's bit-setting RMW, so a pop claiming pos - cap later sees the bit.
          if (in_flight) *in_flight = (deq_.load(std::memory_order_relaxed) & pos_mask) + cap_ > pos;
          return {queue_status::full, 0, nullptr, false};
        }
        word = now;
      } else {
        word = enq_.load(std::memory_order_relaxed);
      }
    }
  }
  /// The item of a claimed push is in its slot (or its constructor threw: the
  /// slot is published empty, and pops skip it); `seq` is that slot's word.
  /// `locked`: the caller holds the parking mutex (a parker's attempt), so a
  /// wake-up must not lock it again.
  void publish(std::atomic<std::uint64_t>& seq, std::uint64_t pos, bool locked, bool wake_poppers) noexcept {
    seq.store(2 * pos + 1, std::memory_order_release);
    if (wake_poppers) [[unlikely]]
      wake(not_empty_, enq_, pop_parked_bit, locked);
  }

  template <class Slot>
  struct pop_claim {
    bool claimed;        ///< pos is the caller's
    std::uint64_t pos;
    Slot* slot;          ///< with claimed: the slot of pos
    bool wake_pushers;   ///< with claimed: pass to release()
    bool drained;        ///< not claimed: closed and nothing left
    bool in_flight;      ///< not claimed: a push has claimed the position, its publish is imminent
  };
  template <class Slot>
  pop_claim<Slot> claim_pop(Slot* slots) noexcept {
    std::uint64_t word = deq_.load(std::memory_order_relaxed);
    for (;;) {
      const std::uint64_t pos = word & pos_mask;
      Slot& s = slots[index(pos)];
      const std::int64_t d = diff(s.seq.load(std::memory_order_acquire), 2 * pos + 1);
      if (d == 0) {
        if (deq_.compare_exchange_weak(word, word + 1, std::memory_order_relaxed, std::memory_order_relaxed))
          return {true, pos, &s, (word & push_parked_bit) != 0, false, false};
      } else if (d < 0) {  // nothing published at pos (yet)
        const std::uint64_t e = enq_.load(std::memory_order_acquire);
        const std::uint64_t now = deq_.load(std::memory_order_relaxed);
        if (now == word)
          return {false, 0, nullptr, false, (e & closed_bit) != 0 && (e & pos_mask) == pos, (e & pos_mask) > pos};
        word = now;
      } else {
        word = deq_.load(std::memory_order_relaxed);
      }
    }
  }
  /// The item of a claimed pop has left its slot (`seq` its word): free for the next lap.
  void release(std::atomic<std::uint64_t>& seq, std::uint64_t pos, bool locked, bool wake_pushers) noexcept {
    seq.store(2 * (pos + cap_), std::memory_order_release);
    if (wake_pushers) [[unlikely]]
      wake(not_full_, deq_, push_parked_bit, locked);
  }

  // ---- blocking: spin, yield, park ----
  /// A push's or pop's attempt, made by the wait: returns true when done
  /// (success, closed, ...), else sets in_flight when the other side has claimed
  /// the position it waits for. A plain function pointer and its object: the
  /// wait below is compiled once, not once per item type.
  struct attempt_ref {
    void* obj;
    bool (*call)(void* obj, bool locked, bool& in_flight);
    bool operator()(bool locked, bool& in_flight) const { return call(obj, locked, in_flight); }
  };
  template <class F>
  static attempt_ref attempt(F& f) noexcept {
    return {&f, [](void* o, bool locked, bool& in_flight) { return (*static_cast<F*>(o))(locked, in_flight); }};
  }

  /// Waits for room: false on timeout (deadline null: never).
  bool wait_push(attempt_ref a, const time_point* deadline) {
    return wait_for(a, /*push=*/true, deq_, push_parked_bit, parked_push_, not_full_, push_spin_, deadline);
  }
  /// Waits for an item (or drained): false on timeout.
  bool wait_pop(attempt_ref a, const time_point* deadline) {
    return wait_for(a, /*push=*/false, enq_, pop_parked_bit, parked_pop_, not_empty_, pop_spin_, deadline);
  }

  /// Idempotent. Wakes every parked push (fails) and pop (drains, then empty).
  void close() noexcept {
    enq_.fetch_or(closed_bit, std::memory_order_acq_rel);
    {
      const std::lock_guard lk(m_);  // a parker checks closed() under m_ before it waits
    }
    not_full_.notify_all();
    not_empty_.notify_all();
  }
  [[nodiscard]] bool closed() const noexcept { return (enq_.load(std::memory_order_acquire) & closed_bit) != 0; }
  [[nodiscard]] std::size_t size() const noexcept {
    const std::uint64_t d = deq_.load(std::memory_order_acquire) & pos_mask;
    const std::uint64_t e = enq_.load(std::memory_order_acquire) & pos_mask;
    return e > d ? static_cast<std::size_t>(std::min<std::uint64_t>(e - d, cap_)) : 0;
  }
  [[nodiscard]] std::uint64_t pushes() const noexcept { return enq_.load(std::memory_order_acquire) & pos_mask; }
  [[nodiscard]] std::size_t capacity() const noexcept { return cap_; }
  [[nodiscard]] int push_spin() const noexcept { return push_spin_.load(std::memory_order_relaxed); }
  [[nodiscard]] int pop_spin() const noexcept { return pop_spin_.load(std::memory_order_relaxed); }

  /// The counts of threads blocked (spinning or parked) in a push / pop, which the queue keeps around its waits.
  std::atomic<std::size_t>& push_waiters() noexcept { return blocked_push_; }
  std::atomic<std::size_t>& pop_waiters() noexcept { return blocked_pop_; }
  [[nodiscard]] std::size_t blocked_pushers() const noexcept { return blocked_push_.load(std::memory_order_acquire); }
  [[nodiscard]] std::size_t blocked_poppers() const noexcept { return blocked_pop_.load(std::memory_order_acquire); }

 private:
  // enq_ = push position | closed_bit | pop_parked_bit; deq_ = pop position | push_parked_bit.
  static constexpr std::uint64_t closed_bit = std::uint64_t{1} << 63;
  static constexpr std::uint64_t pop_parked_bit = std::uint64_t{1} << 62;   // in enq_
  static constexpr std::uint64_t push_parked_bit = std::uint64_t{1} << 63;  // in deq_
  static constexpr std::uint64_t pos_mask = (std::uint64_t{1} << 62) - 1;
  // The adaptive spin's start (see the header comment), and yields before parking.
  static constexpr int initial_spin = 32, yield_rounds = 4;

  // The slot index of a position (no division for power-of-two capacities).
  std::size_t index(std::uint64_t pos) const noexcept {
    return static_cast<std::size_t>(mask_ ? (pos & mask_) : (pos % cap_));
  }

  std::atomic<std::uint64_t>& seq_at(std::size_t i) const noexcept {
    return *std::launder(reinterpret_cast<std::atomic<std::uint64_t>*>(seq0_ + i * stride_));
  }
  std::atomic<std::uint64_t>& seq(std::uint64_t pos) const noexcept { return seq_at(index(pos)); }
  static std::int64_t diff(std::uint64_t a, std::uint64_t b) noexcept { return static_cast<std::int64_t>(a - b); }

  // Wakes every parker of one side and clears its bit; those that still cannot
  // proceed set it again before they sleep. Both happen under m_, and a parker
  // holds m_ from setting the bit until it waits, so every parker that set the
  // bit is waiting once we hold m_. The notify comes after unlocking, so the
  // woken thread does not wake into a held mutex.
  void wake(std::condition_variable& cv, std::atomic<std::uint64_t>& word, std::uint64_t bit, bool locked) noexcept {
    if (locked) {
      word.fetch_and(~bit, std::memory_order_relaxed);
    } else {
      const std::lock_guard lk(m_);
      word.fetch_and(~bit, std::memory_order_relaxed);
    }
    cv.notify_all();
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
    return diff(seq(pos).load(std::memory_order_relaxed), 2 * pos + turn) >= 0;
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

  // Spins a little (polling room_ready() / item_ready(); `patient` for the
  // first half of the spin), then parks on `cv` (advertised by `bit` in
  // `word`) until `attempt` succeeds or the deadline passes. Returns false on
  // timeout.
  bool wait_for(attempt_ref attempt, bool push, std::atomic<std::uint64_t>& word, std::uint64_t bit,
                std::uint32_t& parked, std::condition_variable& cv, std::atomic<int>& spin,
                const time_point* deadline) {
    bool in_flight = false;
    // A heuristic shared by this side's waiters: relaxed, a lost update only mistunes one wait.
    const int budget = spin.load(std::memory_order_relaxed);
    for (int i = 0; i < budget; ++i) {
      detail::cpu_relax();
      if (!(push ? room_ready(i < budget / 2) : item_ready())) continue;
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

  // Explicit padding rather than alignas(64): the words still never share a
  // cache line, and the queue's size stays the plain sum of its members.
  using pad = char[64 - sizeof(std::uint64_t)];
  const std::size_t cap_;
  const std::size_t mask_;  // cap_ - 1 when cap_ is a power of two, else 0
  std::byte* const seq0_;
  const std::size_t stride_;
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

}  // namespace detail
}  // namespace dflash
