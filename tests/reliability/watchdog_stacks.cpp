// The hang watchdog must show where every thread is stuck: ctest
// (watchdog_prints_every_stack) runs this program, whose two worker threads
// wait forever while main holds a 1 s watchdog, and expects the abort message
// and three stacks, two of them inside stuck_waiter. Under a sanitizer that
// ends the process at the first signal-unsafe call in a handler (TSan's
// halt_on_error), a handler that allocates prints one stack or none.
#include "watchdog.hpp"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

// Not static, not inlined: the stack dump names it (the executable exports its symbols).
[[gnu::noinline]] void stuck_waiter(std::mutex& m, std::condition_variable& cv, const bool& go) {
  std::unique_lock lk(m);
  cv.wait(lk, [&] { return go; });
}

int main() {
  std::mutex m;
  std::condition_variable cv;
  bool go = false;
  std::thread a([&] { stuck_waiter(m, cv, go); });
  std::thread b([&] { stuck_waiter(m, cv, go); });
  watchdog w("two waiters nobody wakes", std::chrono::seconds(1));
  a.join();  // never returns: the watchdog aborts the process
  b.join();
}
