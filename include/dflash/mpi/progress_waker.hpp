#pragma once
// How the job's progress thread waits when a pass over its phases found
// nothing to do, and how a link wakes it when it hands work over.
//
// Messages from other ranks are only seen by polling (MPI has no wait that
// also wakes on a local condition), so the thread never sleeps for long:
// after a burst of idle passes it yields, then sleeps at most `nap` per pass
// unless a link calls wake().

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

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

  /// Progress thread, after each pass: `busy` if the pass did anything.
  void after_pass(bool busy) {
    if (busy || wake_.exchange(false, std::memory_order_acq_rel)) {
      idle_passes_ = 0;
    } else if (++idle_passes_ > yield_passes) {
      std::unique_lock lk(m_);
      sleeping_.store(true);
      cv_.wait_for(lk, nap, [&] { return wake_.load(); });
      sleeping_.store(false);
    } else {
      std::this_thread::yield();
    }
  }

  static constexpr int yield_passes = 200;
  static constexpr std::chrono::microseconds nap{100};  // a remote STOP waits at most about this

 private:
  std::mutex m_;
  std::condition_variable cv_;
  std::atomic<bool> wake_{false}, sleeping_{false};
  int idle_passes_ = 0;  // progress thread only
};

}  // namespace dflash::mpi
