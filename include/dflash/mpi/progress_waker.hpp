#pragma once
// How the job's progress thread waits when a pass over its phases found
// nothing to do, and how a link wakes it when it hands work over.
//
// Messages from other ranks are only seen by polling (MPI has no wait that
// also wakes on a local condition), so the thread never sleeps for long; but
// an idle job must not burn a core either. So after a pass that did nothing:
//   * a burst of passes that only yield (work usually comes back within µs);
//   * while MPI requests of this rank are in flight (a transfer that needs
//     this rank's progress calls to move, and that the peer's progress
//     thread completes promptly), only yields;
//   * otherwise naps that double up to max_nap: an idle job costs a few
//     hundred passes a second, and a remote STOP waits at most about max_nap.
// Any pass that did something, and any wake() (a link handing over an item
// or a credit, or a stage about to block in send/receive), starts over at
// full speed, so a blocked stage is served within µs of its data arriving.
// While a stage thread drives its link itself (job::drive), the thread only
// naps (driven_nap, or until a wake()): on shared cores a polling progress
// thread would take half the driver's core.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

#include "dflash/detail/std_chrono.hpp"

namespace dflash::mpi {

class progress_waker {
 public:
  /// A link has work for the progress thread: wake it now rather than at its next poll.
  void wake() noexcept {
    wake_.store(true);  // seq_cst with sleeping_: the thread either sees wake_ or is told
    if (sleeping_.load()) {
      std::lock_guard lk(m_);
      cv_.notify_one();
    }
  }

  /// Progress thread, after each pass: `busy` if the pass did anything,
  /// `in_flight` if MPI requests of this rank are not complete yet, `driven`
  /// if a stage thread is driving its link.
  void after_pass(bool busy, bool in_flight, bool driven = false) {
    if (driven) {
      idle_passes_ = 0;
      if (!wake_.exchange(false, std::memory_order_acq_rel)) nap(driven_nap);
      return;
    }
    if (busy || wake_.exchange(false, std::memory_order_acq_rel)) {
      idle_passes_ = 0;
      return;
    }
    if (idle_passes_ < max_counted) ++idle_passes_;
    const auto d = wait_after(idle_passes_, in_flight);
    if (d.count() == 0) {
      std::this_thread::yield();
      return;
    }
    nap(d);
  }

  /// The policy: how long the n-th idle pass in a row waits (0: it only yields).
  static constexpr std::chrono::microseconds wait_after(int n, bool in_flight) noexcept {
    if (n <= yield_passes || in_flight) return std::chrono::microseconds{0};
    const int doublings = std::min(n - yield_passes - 1, 16);
    return std::min(min_nap * (std::int64_t{1} << doublings), max_nap);
  }

  static constexpr int yield_passes = 100;
  static constexpr std::chrono::microseconds min_nap{50}, max_nap{10000}, driven_nap{200};

 private:
  void nap(std::chrono::microseconds d) {
    std::unique_lock lk(m_);
    sleeping_.store(true);
    cv_.wait_for(lk, d, [&] { return wake_.load(); });
    sleeping_.store(false);
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<bool> wake_{false}, sleeping_{false};
  static constexpr int max_counted = yield_passes + 64;
  int idle_passes_ = 0;  // progress thread only
};

}  // namespace dflash::mpi
