#pragma once
// A test that can deadlock holds a watchdog: if the scope does not end within
// `limit`, it names the test, prints every thread's stack (where each one is
// stuck) and aborts, so CI fails in seconds with a lead instead of hanging
// until ctest's timeout.

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#if defined(__linux__)
#include <dirent.h>
#include <execinfo.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace watchdog_detail {
#if defined(__linux__)
inline void print_stack(int) {
  void* frames[48];
  const int n = backtrace(frames, 48);
  char head[64];
  const int len = std::snprintf(head, sizeof head, "--- thread %ld:\n", static_cast<long>(syscall(SYS_gettid)));
  if (len > 0) (void)!write(2, head, static_cast<std::size_t>(len));
  backtrace_symbols_fd(frames, n, 2);
}
// Asks every other thread of the process to print its stack (a signal each,
// handled on that thread), then gives them a moment to do so.
inline void dump_all_stacks() {
  struct sigaction sa {};
  sa.sa_handler = print_stack;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
  const long self = syscall(SYS_gettid);
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid > 0 && tid != self) syscall(SYS_tgkill, getpid(), tid, SIGUSR2);
    }
    closedir(d);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
}
#else
inline void dump_all_stacks() {}
#endif
}  // namespace watchdog_detail

class watchdog {
 public:
  explicit watchdog(std::string what, std::chrono::seconds limit = std::chrono::seconds(20))
      : what_(std::move(what)), t_([this, limit] {
          std::unique_lock lk(m_);
          if (!cv_.wait_for(lk, limit, [this] { return done_; })) {
            std::fprintf(stderr, "watchdog: '%s' did not finish within %lld s (hang or deadlock?); stacks:\n",
                         what_.c_str(), static_cast<long long>(limit.count()));
            watchdog_detail::dump_all_stacks();
            std::abort();
          }
        }) {}
  watchdog(const watchdog&) = delete;
  watchdog& operator=(const watchdog&) = delete;
  ~watchdog() {
    {
      std::lock_guard lk(m_);
      done_ = true;
    }
    cv_.notify_all();
    t_.join();
  }

 private:
  std::string what_;
  std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread t_;
};
