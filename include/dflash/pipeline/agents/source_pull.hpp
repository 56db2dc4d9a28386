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
// Who calls: a source with one worker (several workers' calls may wait for
// one another, pipeline/core.hpp). Its seat keeps one call at a time; the
// holder makes the call and, on the source's own thread, also the push that
// follows, so items enter the link in call order. A consumer thread only
// ever tries the seat; the source's own thread waits for it (parked: the seat
// is held across a source call, which may block).
//
// When: the source's own thread calls while the source is not known cheap,
// or while a consumer thread waits in the link for an item (it found the
// seat taken, or the source not cheap); otherwise it parks here. cancel,
// drain and the source's end wake it.

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/pipeline/agents/sampled_cost.hpp"

namespace dflash::detail {

class source_pull {
 public:
  // ---- the seat ----
  /// The seat, if free and the source not exhausted; never waits.
  [[nodiscard]] bool try_take() noexcept { return !exhausted() && m_seat_.try_lock(); }
  /// The seat for the source's own thread: waits, parked, while a consumer thread holds it.
  void take() { m_seat_.lock(); }
  void give() noexcept { m_seat_.unlock(); }

  // ---- the sampled cost (sampled_cost.hpp; "unknown" at first: the own thread calls until sampled cheap) ----
  [[nodiscard]] bool cheap() const noexcept { return cost_.cheap(); }
  /// Whether the seat's holder times this call (it then reports it with sampled()).
  [[nodiscard]] bool sample(std::size_t) noexcept { return calls_++ % sampled_cost::sample_every == 0; }
  void sampled(std::chrono::nanoseconds d) noexcept { cost_.sampled(d); }

  // ---- the end: the source returned no item; nobody calls it again ----
  [[nodiscard]] bool exhausted() const noexcept { return exhausted_.load(std::memory_order_acquire); }
  /// Called under the seat. Wakes the source's own thread, which then exits.
  void exhaust() {
    exhausted_.store(true, std::memory_order_release);
    {
      const std::lock_guard lk(m_);  // a parker checks under m_ before it waits
    }
    cv_.notify_all();
  }

  // ---- the own thread's park ----
  /// Parks while the source is cheap and no consumer thread waits for an
  /// item. false: the source is exhausted or the run ends.
  [[nodiscard]] bool park() {
    std::unique_lock lk(m_);
    cv_.wait(lk, [&] { return ended_ || exhausted() || waiting_ != 0 || !cheap(); });
    return !ended_ && !exhausted();
  }
  /// A consumer thread waits in the link for an item from the own thread
  /// (for as long as the guard lives).
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
  /// cancel or drain: the own thread wakes and exits.
  void end() noexcept {
    try {
      {
        const std::lock_guard lk(m_);
        ended_ = true;
      }
      cv_.notify_all();
    } catch (...) {  // std::mutex::lock throws only on misuse; cancel must not throw
    }
  }

 private:
  alignas(64) std::mutex m_seat_;
  std::uint32_t calls_ = 0;  // touched only by the seat's holder
  std::atomic<bool> exhausted_{false};
  sampled_cost cost_;
  alignas(64) std::mutex m_;
  std::condition_variable cv_;
  int waiting_ = 0;  // under m_
  bool ended_ = false;
};

/// Holds the seat of a source_pull until released or destroyed (also when the source throws).
class source_seat {
 public:
  explicit source_seat(source_pull* p) noexcept : p_(p) {}
  source_seat(const source_seat&) = delete;
  source_seat& operator=(const source_seat&) = delete;
  ~source_seat() { release(); }
  void release() noexcept {
    if (p_ != nullptr) p_->give(), p_ = nullptr;
  }

 private:
  source_pull* p_;
};

}  // namespace dflash::detail
