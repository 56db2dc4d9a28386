#pragma once
// What the parts of a dflash::mpi::job (job.hpp) read and its calls set: a
// stop asked for or seen, finish() called, this rank's error, and the hooks
// into the pipeline that a run() is running. Thread-safe.

#include <atomic>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

namespace dflash::mpi::detail {

class job_state {
 public:
  /// Records this rank's error (the first one is kept) and asks for a stop.
  void fail(std::string what) {
    {
      std::lock_guard lk(error_m_);
      if (error_.empty()) error_ = std::move(what);
    }
    request_stop();
  }
  [[nodiscard]] std::string error() const {
    std::lock_guard lk(error_m_);
    return error_;
  }

  /// A stop of every rank, from this one (the progress thread sends STOP).
  void request_stop() noexcept { stop_requested_.store(true, std::memory_order_release); }
  [[nodiscard]] bool stop_requested() const noexcept { return stop_requested_.load(std::memory_order_acquire); }
  /// A STOP was seen (from this rank or another): true the first time.
  bool enter_stop() noexcept { return !stopped_.exchange(true, std::memory_order_acq_rel); }
  [[nodiscard]] bool stopped() const noexcept { return stopped_.load(std::memory_order_acquire); }
  /// A run of this rank's ended by a stop: its own (stop(), drain or cancel)
  /// or the job's. What job_result::stopped_early reports, with the STOPs.
  void note_stopped_run() noexcept { stopped_run_.store(true, std::memory_order_release); }
  [[nodiscard]] bool ended_by_stop() const noexcept {
    return stopped_run_.load(std::memory_order_acquire) || stopped() || stop_requested();
  }
  /// finish() (or ~job) was called: the progress thread ends the job.
  void request_finish() noexcept { finish_requested_.store(true, std::memory_order_release); }
  [[nodiscard]] bool finish_requested() const noexcept { return finish_requested_.load(std::memory_order_acquire); }

  /// While run(p) runs p: whether p was cancelled, and how to stop it.
  template <class Pipe>
  void watch(Pipe& p) {
    std::lock_guard lk(hook_m_);
    cancelled_hook_ = [&p] { return p.cancelled(); };
    stop_hook_ = [&p] { p.stop(); };
  }
  void unwatch() {
    std::lock_guard lk(hook_m_);
    cancelled_hook_ = nullptr;
    stop_hook_ = nullptr;
  }
  /// The pipeline being run was cancelled (a stage threw or stopped it).
  [[nodiscard]] bool cancelled() {
    std::lock_guard lk(hook_m_);
    return cancelled_hook_ && cancelled_hook_();
  }
  /// Stops the pipeline being run, if any.
  void stop_pipeline() {
    std::lock_guard lk(hook_m_);
    if (stop_hook_) stop_hook_();
  }

 private:
  mutable std::mutex error_m_;
  std::string error_;
  std::mutex hook_m_;
  std::function<bool()> cancelled_hook_;
  std::function<void()> stop_hook_;
  std::atomic<bool> stop_requested_{false}, stopped_{false}, finish_requested_{false}, stopped_run_{false};
};

}  // namespace dflash::mpi::detail
