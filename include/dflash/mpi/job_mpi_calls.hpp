#pragma once
// Who makes a dflash::mpi::job's MPI calls (job.hpp), and how its progress
// thread waits between passes (progress_waker.hpp).
//
// Threading: after start(), the job's MPI calls are made by its progress
// thread, or by a stage thread that drives its own link (see drive()), one at
// a time under one lock; before start() / after finish() by the calling
// thread, never at once: MPI_THREAD_SERIALIZED is enough (see runtime.hpp).
// One thread polling with MPI_Iprobe/MPI_Test is also what lets a blocked
// rank notice a remote stop. If the program initialised MPI itself with
// MPI_THREAD_MULTIPLE it may keep making its own MPI calls concurrently;
// under MPI_THREAD_SERIALIZED it makes them holding lock_mpi().

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <utility>

#include "dflash/mpi/progress_waker.hpp"
#include "dflash/mpi/runtime.hpp"

namespace dflash::mpi::detail {

// Something escaped the progress thread (or a link driven by a stage thread):
// its links' and the job's state is unknown, so no orderly end is possible.
// Every rank must still end: abort.
[[noreturn]] inline void fatal(const runtime& rt, const char* what) noexcept {
  std::fprintf(stderr,
               "dflash::mpi: rank %d: the MPI progress thread failed: %s; aborting the job (MPI_Abort) so that no "
               "rank waits for this one\n",
               rt.rank(), what);
  std::fflush(stderr);
  MPI_Abort(rt.comm(), 1);
  std::abort();
}

class mpi_calls {
 public:
  explicit mpi_calls(const runtime& rt) : rt_(rt) {}

  /// Held by whichever thread makes the job's MPI calls after start(): the
  /// progress thread for a pass, a stage thread in drive(), or the program
  /// (job::lock_mpi()).
  [[nodiscard]] std::unique_lock<std::mutex> lock() { return std::unique_lock(m_); }
  /// With lock() held: stage threads may drive their links (between start()
  /// and the end of the progress loop).
  void allow_driving(bool allowed) noexcept { driving_allowed_ = allowed; }

  /// A stage thread makes a link's MPI calls itself (`work`: a pass over the
  /// link, or only the post it is handing over), so an item or credit needs
  /// no hand-off to the progress thread: a thread switch costs more than the
  /// calls when cores are shared. Only while the job runs and no other
  /// thread of it is making MPI calls (never waits for that); false if it
  /// did not.
  template <class Work>
  bool drive(Work&& work) {
    std::unique_lock lk(m_, std::try_to_lock);
    if (!lk.owns_lock() || !driving_allowed_) return false;
    try {
      work();
    } catch (const std::exception& e) {  // as on the progress thread: the link's state is unknown
      fatal(rt_, e.what());
    } catch (...) {
      fatal(rt_, "unknown exception");
    }
    ++drives_;
    return true;
  }

  /// While one exists, a stage thread is blocked on a link and drives it
  /// (drive()) in a loop; the progress thread naps meanwhile (and while stage
  /// threads keep driving), so the two do not share a core.
  class driver_scope {
   public:
    explicit driver_scope(mpi_calls& c) noexcept : c_(&c) { c.drivers_.fetch_add(1, std::memory_order_relaxed); }
    ~driver_scope() { end(); }
    /// The stage thread stops driving (a thread about to sleep then wakes the progress thread).
    void end() noexcept {
      if (!c_) return;
      c_->drivers_.fetch_sub(1, std::memory_order_relaxed);
      c_ = nullptr;
    }
    driver_scope(const driver_scope&) = delete;
    driver_scope& operator=(const driver_scope&) = delete;

   private:
    mpi_calls* c_;
  };

  /// A link has work for the progress thread (an item to send, a credit to
  /// return): wake it now rather than at its next poll.
  void wake() noexcept { waker_.wake(); }
  /// With lock() held, at the end of a pass: stage threads drove since the last one.
  [[nodiscard]] bool drove() noexcept { return std::exchange(drives_, 0) > 0; }
  /// After a pass, without the lock: how the progress thread waits for the next.
  void after_pass(bool busy, bool requests, bool driven) {
    waker_.after_pass(busy, requests, driven || drivers_.load(std::memory_order_relaxed) > 0);
  }

 private:
  const runtime& rt_;
  std::mutex m_;
  bool driving_allowed_ = false;  // guarded by m_: between start() and the loop's end
  std::atomic<int> drivers_{0};   // stage threads in a driver_scope
  std::uint64_t drives_ = 0;      // guarded by m_: drive() calls since the progress thread's last pass
  progress_waker waker_;
};

}  // namespace dflash::mpi::detail
