#pragma once
// source_pull: a cheap host source called by the threads of the stage after
// it, as oneTBB's threads run the input filter when they need a token, and
// the source's own thread retired while they do (host_worker.hpp).
//
// Why, measured (docs/bench/pipeline.md): with a thread per source worker, a
// short link after the source costs a wake and a context switch per item (the
// source's thread parks on a full link and every pop wakes it: ~6 us of CPU
// per item at depth 2 on 2 cores, 8 % of a 70 us pipeline), and a worker that
// empties the link waits for a source thread that is not running. A source
// whose sampled call is cheap costs less to call than to wake.
//
// Who calls: a seat per source worker index keeps one call per index at a
// time; its holder makes the call and, on the source's own thread, also the
// push that follows, so one index's items enter the link in call order. A
// consumer thread only ever tries a seat; the source's own thread waits for
// its seat (parked: a seat is held across a source call, which may block).
//
// When: the source's own thread calls while the source is not known cheap,
// or while a consumer thread waits in the link for an item (it found no free
// seat, or the source not cheap); otherwise it parks here. cancel, drain and
// an exhausted index wake it.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>

#include "dflash/pipeline/agents/stage_seats.hpp"

namespace dflash::detail {

class source_pull {
 public:
  static constexpr std::size_t none = ~std::size_t{0};

  explicit source_pull(std::size_t n) : n_(n), seats_(std::make_unique<seat[]>(n)) {}

  [[nodiscard]] std::size_t size() const noexcept { return n_; }

  // ---- seats ----
  /// A free seat whose index is not exhausted, or `none`; never waits.
  [[nodiscard]] std::size_t try_take() noexcept {
    for (std::size_t i = 0; i < n_; ++i)
      if (!exhausted(i) && seats_[i].m.try_lock()) return i;
    return none;
  }
  /// Seat i for the source's own thread i: waits, parked, while a consumer thread holds it.
  void take(std::size_t i) { seats_[i].m.lock(); }
  void give(std::size_t i) noexcept { seats_[i].m.unlock(); }

  // ---- the sampled cost (as stage_seats: the smaller of the two latest samples) ----
  [[nodiscard]] bool cheap() const noexcept {
    return std::min(cost_ns_[0].load(std::memory_order_relaxed), cost_ns_[1].load(std::memory_order_relaxed)) <
           stage_seats::cheap_ns;
  }
  [[nodiscard]] bool sample(std::size_t i) noexcept { return seats_[i].calls++ % stage_seats::sample_every == 0; }
  void sampled(std::chrono::nanoseconds d) noexcept {
    cost_ns_[next_.fetch_add(1, std::memory_order_relaxed) & 1].store(d.count(), std::memory_order_relaxed);
  }

  // ---- exhaustion: index i returned no item; nobody calls it again ----
  [[nodiscard]] bool exhausted(std::size_t i) const noexcept {
    return seats_[i].exhausted.load(std::memory_order_acquire);
  }
  /// Called under seat i. Wakes index i's own thread, which then exits.
  void exhaust(std::size_t i) {
    seats_[i].exhausted.store(true, std::memory_order_release);
    wake_all();
  }
  /// Some index is not exhausted.
  [[nodiscard]] bool live() const noexcept {
    for (std::size_t i = 0; i < n_; ++i)
      if (!exhausted(i)) return true;
    return false;
  }

  // ---- the own threads' park ----
  /// Own thread i: parks while the source is cheap and no consumer thread
  /// waits for an item. false: index i is exhausted or the run ends.
  [[nodiscard]] bool park(std::size_t i) {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return ended_ || exhausted(i) || waiting_ != 0 || !cheap(); });
    return !ended_ && !exhausted(i);
  }
  /// A consumer thread waits in the link for an item from the own threads
  /// (RAII: for as long as the guard lives).
  class waiting {
   public:
    explicit waiting(source_pull& p) : p_(p) {
      {
        const std::lock_guard lk(p_.m_);
        ++p_.waiting_;
      }
      p_.cv_.notify_all();
    }
    waiting(const waiting&) = delete;
    waiting& operator=(const waiting&) = delete;
    ~waiting() {
      const std::lock_guard lk(p_.m_);
      --p_.waiting_;
    }

   private:
    source_pull& p_;
  };
  /// cancel or drain: every own thread wakes and exits.
  void end() noexcept {
    try {
      {
        const std::lock_guard lk(m_);
        ended_ = true;
      }
      cv_.notify_all();
    } catch (...) {  // std::mutex::lock only throws on misuse; cancel must not throw
    }
  }
  /// Consumer threads waiting in the link for an item now (for tests and diagnostics).
  [[nodiscard]] int waiting_consumers() {
    const std::lock_guard lk(m_);
    return waiting_;
  }

 private:
  void wake_all() {
    {
      const std::lock_guard lk(m_);  // a parker checks under m_ before it waits
    }
    cv_.notify_all();
  }

  struct alignas(64) seat {
    std::mutex m;
    std::uint32_t calls = 0;  // touched only by the seat's holder
    std::atomic<bool> exhausted{false};
  };
  std::size_t n_;
  std::unique_ptr<seat[]> seats_;
  static constexpr std::int64_t unknown = std::numeric_limits<std::int64_t>::max();
  std::atomic<std::int64_t> cost_ns_[2]{unknown, unknown};  // "unknown": the own threads call until sampled cheap
  std::atomic<unsigned> next_{0};
  std::mutex m_;
  std::condition_variable cv_;
  int waiting_ = 0;  // under m_
  bool ended_ = false;
};

/// Holds seat i of a source_pull until released or destroyed (also when the source throws).
class source_seat {
 public:
  source_seat() = default;
  source_seat(source_pull* p, std::size_t i) noexcept : p_(p), i_(i) {}
  source_seat(const source_seat&) = delete;
  source_seat& operator=(const source_seat&) = delete;
  ~source_seat() { release(); }
  void release() noexcept {
    if (p_ != nullptr) p_->give(i_), p_ = nullptr;
  }

 private:
  source_pull* p_ = nullptr;
  std::size_t i_ = 0;
};

}  // namespace dflash::detail
