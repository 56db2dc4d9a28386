#pragma once
// detail::run_control: how a run of a Pipeline ends — cancel (every thread
// stops after its current call), drain (the source stops, the rest finishes),
// the first error (the one join() rethrows) — and the numbering of source
// items across every source worker. Flags only: what a cancel wakes (links,
// parked threads) is the core's (core.hpp), which knows them.

#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <utility>

namespace dflash::detail {

class run_control {
 public:
  [[nodiscard]] bool cancelled() const noexcept { return cancelled_.load(std::memory_order_acquire); }
  [[nodiscard]] bool draining() const noexcept { return draining_.load(std::memory_order_acquire); }
  /// The next source sequence number, one numbering across every source worker.
  std::uint64_t next_seq() noexcept { return source_seq_.fetch_add(1, std::memory_order_relaxed); }
  [[nodiscard]] std::exception_ptr take_error() noexcept {
    std::lock_guard lk(err_m_);
    return std::exchange(error_, nullptr);
  }

 protected:
  void mark_draining() noexcept { draining_.store(true, std::memory_order_release); }
  void mark_cancelled() noexcept { cancelled_.store(true, std::memory_order_release); }
  /// Keeps e if it is the run's first error.
  void keep_first_error(std::exception_ptr e) noexcept {
    std::lock_guard lk(err_m_);
    if (!error_) error_ = std::move(e);
  }

 private:
  std::atomic<std::uint64_t> source_seq_{0};
  std::atomic<bool> cancelled_{false};
  std::atomic<bool> draining_{false};
  std::mutex err_m_;
  std::exception_ptr error_;
};

}  // namespace dflash::detail
