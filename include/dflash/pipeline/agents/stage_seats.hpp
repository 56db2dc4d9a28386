#pragma once
// stage_seats: who may call a host stage right now. A stage reached over a
// queue link is called by its own threads and, help-first, by its producers'
// threads (host_worker.hpp); a seat per worker index keeps "one call per
// index at a time" (what a stage taking its worker index relies on), and an
// in_order stage's one seat guards its reorder buffer.
//
// It also holds what decides whether a producer helps: the stage's sampled
// call duration (sampled_cost.hpp). A producer that runs a slow call inline
// stops producing for that long while the stage's own threads sit idle.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <thread>

#include "dflash/detail/spin.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/agents/sampled_cost.hpp"

namespace dflash::detail {

class stage_seats {
 public:
  static constexpr std::size_t none = ~std::size_t{0};
  /// A helped call must have sampled below this (sampled_cost.hpp).
  static constexpr std::int64_t cheap_ns = sampled_cost::cheap_ns;
  /// One call in `sample_every` per seat is timed (two clock reads).
  static constexpr std::uint32_t sample_every = sampled_cost::sample_every;

  explicit stage_seats(std::size_t n) : n_(n), seats_(std::make_unique<seat[]>(n)) {}

  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  /// The stage's sampled call is cheap (sampled_cost::cheap).
  [[nodiscard]] bool cheap() const noexcept { return cost_.cheap(); }

  /// A free seat for a helper, or `none`; never waits, and leaves the seats to
  /// the stage's own threads while one of them waits for a seat.
  [[nodiscard]] std::size_t try_take() noexcept {
    if (waiting_.load(std::memory_order_relaxed) != 0) return none;
    return any_free();
  }
  /// Seat i for the stage's own thread i: its calls keep its worker index, so
  /// the items one producer thread sends reach each index in queue order. A
  /// helper holds a seat for one cheap call, or (one seat) through its
  /// hand-on, which may wait for room downstream: spin, then yield, then
  /// short sleeps; helpers take no seat meanwhile.
  void take(std::size_t i) noexcept {
    if (grab(i)) return;
    waiting_.fetch_add(1, std::memory_order_relaxed);
    for (int round = 0; !grab(i); ++round) {
      if (round < 16) cpu_relax();
      else if (round < 80) std::this_thread::yield();
      else std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    waiting_.fetch_sub(1, std::memory_order_relaxed);
  }
  void give(std::size_t i) noexcept { seats_[i].busy.store(false, std::memory_order_release); }
  /// Own threads waiting in take() now (for tests and diagnostics).
  [[nodiscard]] int waiting() const noexcept { return waiting_.load(std::memory_order_relaxed); }

  /// The stage's own thread took a seat for an item it popped from the queue
  /// (all but in_order stages). A helper compares the count with the queue's
  /// pushes: only when every pushed item has been seated does a helped item
  /// overtake none, so items keep FIFO order per producer thread.
  void seated_one() noexcept { seated_.fetch_add(1, std::memory_order_release); }
  [[nodiscard]] std::uint64_t seated() const noexcept { return seated_.load(std::memory_order_acquire); }
  /// Every item pushed to `q` so far (q.pushes()) has been seated, so a helped
  /// item overtakes none. The seated count is read first: the k items seated
  /// then stand at k distinct queue positions, all below any push count read
  /// later. Read the other way round, items pushed and seated between the two
  /// reads (another producer's) could stand in for an earlier unseated one.
  template <class Queue>
  [[nodiscard]] bool all_seated(const Queue& q) const noexcept {
    const std::uint64_t s = seated();
    return q.pushes() <= s;
  }

  /// Whether the holder of seat i times this call (it then reports it with sampled()).
  [[nodiscard]] bool sample(std::size_t i) noexcept { return seats_[i].calls++ % sample_every == 0; }
  void sampled(std::chrono::nanoseconds d) noexcept { cost_.sampled(d); }

 private:
  std::size_t any_free() noexcept {
    for (std::size_t i = 0; i < n_; ++i)
      if (grab(i)) return i;
    return none;
  }
  bool grab(std::size_t i) noexcept {
    auto& b = seats_[i].busy;
    return !b.load(std::memory_order_relaxed) && !b.exchange(true, std::memory_order_acquire);
  }
  struct alignas(64) seat {
    std::atomic<bool> busy{false};
    std::uint32_t calls = 0;  // touched only by the seat's holder
  };
  std::size_t n_;
  std::unique_ptr<seat[]> seats_;
  sampled_cost cost_;
  alignas(64) std::atomic<std::uint64_t> seated_{0};
  std::atomic<int> waiting_{0};  // own threads waiting in take()
};

/// Holds a seat until released or destroyed (also when a stage throws); holds nothing for null seats.
class seat_hold {
 public:
  seat_hold(stage_seats* s, std::size_t i) noexcept : s_(s), i_(i) {}
  seat_hold(const seat_hold&) = delete;
  seat_hold& operator=(const seat_hold&) = delete;
  ~seat_hold() { release(); }
  void release() noexcept {
    if (s_ != nullptr) s_->give(i_), s_ = nullptr;
  }

 private:
  stage_seats* s_;
  std::size_t i_;
};

}  // namespace dflash::detail
