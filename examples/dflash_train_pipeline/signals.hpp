#pragma once
// SIGINT / SIGTERM for the example. The first one stops the pipeline
// (Pipeline::stop(), called from a watcher thread, never from a signal
// handler), so the run ends as it does after its last step: the final profile,
// the trace file and the result are written; the program then exits with
// 128 + the signal (130 for SIGINT, 143 for SIGTERM). One stop request can
// arrive as several signals — GNU timeout, Slurm and mpirun signal the process
// and its process group — so every signal within stop_requests::copies_window
// (1 s) of the first is that same request. A signal after it is a second
// request and exits at once with 128 + that signal, writing nothing more.
//
//   signal_watch watch("prog");               // in main, before any thread starts
//   ...
//   p.run();
//   const stop_on_signal guard([&p] { p.stop(); });  // while it lives, a signal stops p
//   p.join();
//   ...
//   return watch.exit_code(0);                // 0, or 128 + the signal that stopped the run
//
// How: the constructor blocks SIGINT and SIGTERM in the calling thread, so
// every thread started later inherits the block, and one thread takes them
// with sigtimedwait(). Without POSIX signals both classes do nothing.

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <utility>

#if __has_include(<signal.h>) && __has_include(<pthread.h>) && __has_include(<unistd.h>)
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <ctime>
#include <thread>
#define DFLASH_EXAMPLE_POSIX_SIGNALS 1
#else
#define DFLASH_EXAMPLE_POSIX_SIGNALS 0
#endif

namespace dflash_example {

/// What a SIGINT/SIGTERM means, given when the first one came: the first
/// stops the run; those within `copies_window` of it are copies of the same
/// request (a process and its group both signalled); a later one is a
/// second request, after the first was acknowledged on stderr.
class stop_requests {
 public:
  using clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds copies_window{1000};
  enum class verdict { first, copy, again };

  verdict on_signal(int sig, clock::time_point now) noexcept {
    if (first_ == 0) {
      first_ = sig;
      first_at_ = now;
      return verdict::first;
    }
    return now - first_at_ < copies_window ? verdict::copy : verdict::again;
  }
  /// The signal of the first request (0: none yet).
  [[nodiscard]] int first() const noexcept { return first_; }

 private:
  int first_ = 0;
  clock::time_point first_at_{};
};

class signal_watch;
namespace detail {
inline std::atomic<signal_watch*> active_watch{nullptr};
}  // namespace detail

#if DFLASH_EXAMPLE_POSIX_SIGNALS
class signal_watch {
 public:
  explicit signal_watch(std::string self) : self_(std::move(self)) {
    sigemptyset(&set_);
    sigaddset(&set_, SIGINT);
    sigaddset(&set_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set_, &old_);
    watcher_ = std::thread([this] { watch(); });
    detail::active_watch.store(this);
  }
  signal_watch(const signal_watch&) = delete;
  signal_watch& operator=(const signal_watch&) = delete;
  ~signal_watch() {
    detail::active_watch.store(nullptr);
    done_.store(true);
    watcher_.join();
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);  // a signal still pending now ends the process
  }

  /// The signal that stopped the run (0: none).
  [[nodiscard]] int received() const noexcept { return received_.load(); }
  /// `normal` when no signal came, else 128 + the signal (the shell's convention).
  [[nodiscard]] int exit_code(int normal) const noexcept { return received() ? 128 + received() : normal; }

  /// While armed, the first signal calls `stop` (at once if it already came).
  void arm(std::function<void()> stop) {
    std::lock_guard lk(m_);
    stop_ = std::move(stop);
    if (received_.load() && stop_) stop_();
  }
  void disarm() {
    std::lock_guard lk(m_);
    stop_ = nullptr;
  }

 private:
  void watch() {
    while (!done_.load()) {
      const timespec tick{0, 50'000'000};  // 50 ms: how long the destructor may wait
      const int sig = sigtimedwait(&set_, nullptr, &tick);
      if (sig <= 0) continue;
      const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
      switch (requests_.on_signal(sig, stop_requests::clock::now())) {
        case stop_requests::verdict::copy:
          continue;  // the same request again (process and group both signalled)
        case stop_requests::verdict::again: {
          const std::string msg = "\n" + self_ + ": " + name + " again: exiting now\n";
          (void)!::write(STDERR_FILENO, msg.data(), msg.size());
          std::_Exit(128 + sig);
        }
        case stop_requests::verdict::first:
          break;
      }
      received_.store(sig);
      const std::string msg = "\n" + self_ + ": " + name +
                              ": stopping the pipeline; the final report follows (signal again after 1 s to exit at "
                              "once)\n";
      (void)!::write(STDERR_FILENO, msg.data(), msg.size());
      std::lock_guard lk(m_);
      if (stop_) stop_();
    }
  }

  std::string self_;
  sigset_t set_{}, old_{};
  stop_requests requests_;  // the watcher thread's only
  std::atomic<int> received_{0};
  std::atomic<bool> done_{false};
  std::mutex m_;
  std::function<void()> stop_;
  std::thread watcher_;
};
#else
class signal_watch {
 public:
  explicit signal_watch(std::string) { detail::active_watch.store(this); }
  ~signal_watch() { detail::active_watch.store(nullptr); }
  [[nodiscard]] int received() const noexcept { return 0; }
  [[nodiscard]] int exit_code(int normal) const noexcept { return normal; }
  void arm(std::function<void()>) {}
  void disarm() {}
};
#endif

/// While it lives, the first SIGINT/SIGTERM calls `stop` — when a
/// signal_watch exists (the example's main); otherwise (tests, benchmarks) nothing.
class stop_on_signal {
 public:
  explicit stop_on_signal(std::function<void()> stop) : w_(detail::active_watch.load()) {
    if (w_) w_->arm(std::move(stop));
  }
  stop_on_signal(const stop_on_signal&) = delete;
  stop_on_signal& operator=(const stop_on_signal&) = delete;
  ~stop_on_signal() {
    if (w_) w_->disarm();
  }

 private:
  signal_watch* w_;
};

}  // namespace dflash_example
