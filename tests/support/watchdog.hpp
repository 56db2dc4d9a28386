#pragma once
// A test that can deadlock holds a watchdog: if the scope does not end within
// `limit`, it names the test, prints every thread's stack (where each one is
// stuck) and aborts, so CI fails in seconds with a lead instead of hanging
// until ctest's timeout.

#include <atomic>
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
// The thread whose stack print_stack last finished printing: one thread
// prints at a time, so stacks come out whole rather than interleaved.
inline std::atomic<long> stack_printed{0};
inline void print_stack(int) {
  void* frames[48];
  const int n = backtrace(frames, 48);
  const long tid = syscall(SYS_gettid);
  char head[64];
  const int len = std::snprintf(head, sizeof head, "--- thread %ld:\n", tid);
  if (len > 0) (void)!write(2, head, static_cast<std::size_t>(len));
  backtrace_symbols_fd(frames, n, 2);
  stack_printed.store(tid, std::memory_order_release);  // lock-free: safe in a handler
}
// Asks every other thread of the process to print its stack: a signal each,
// handled on that thread, the next one sent when that stack is out.
inline void dump_all_stacks() {
  // glibc loads the unwinder (libgcc_s) on the first backtrace(), and loading
  // allocates: inside the handler that is not async-signal-safe, and TSan
  // (halt_on_error) ends the process at the first thread, losing the others'
  // stacks. Loaded here, outside any handler, the handlers only unwind.
  void* warm[1];
  (void)backtrace(warm, 1);
  struct sigaction sa {};
  sa.sa_handler = print_stack;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGUSR2, &sa, nullptr);
  const long self = syscall(SYS_gettid);
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      const long tid = std::strtol(e->d_name, nullptr, 10);
      if (tid <= 0 || tid == self) continue;
      stack_printed.store(0, std::memory_order_relaxed);
      if (syscall(SYS_tgkill, getpid(), tid, SIGUSR2) != 0) continue;  // it has just ended
      // One at a time; a thread that cannot take the signal soon is skipped.
      for (int ms = 0; ms < 500 && stack_printed.load(std::memory_order_acquire) != tid; ++ms)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    closedir(d);
  }
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
