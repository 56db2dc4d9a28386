// The example's SIGINT/SIGTERM handling (signals.hpp), in a forked child so
// that a signal that ends the process ends only the child: one stop request
// that arrives as several signals (GNU timeout, Slurm and mpirun signal the
// process and its group) stops once; a request after the first was
// acknowledged exits at once.
#include <catch2/catch.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include "signals.hpp"

using namespace dflash_example;
using namespace std::chrono_literals;

namespace {
// Runs `child` in a forked process and returns its exit status (or 1000 + the
// signal that killed it).
template <class F>
int in_child(F child) {
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) std::_Exit(child());
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
}

template <class Pred>
bool wait_for(Pred p, std::chrono::milliseconds limit = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + limit;
  while (!p()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}
}  // namespace

TEST_CASE("stop_requests: copies within the window are the first request; a later one is a second", "[signals]") {
  using clock = stop_requests::clock;
  const auto t0 = clock::time_point{} + 100s;
  stop_requests r;
  CHECK(r.on_signal(SIGINT, t0) == stop_requests::verdict::first);
  CHECK(r.first() == SIGINT);
  CHECK(r.on_signal(SIGINT, t0 + 1ms) == stop_requests::verdict::copy);
  CHECK(r.on_signal(SIGTERM, t0 + stop_requests::copies_window - 1ms) == stop_requests::verdict::copy);
  CHECK(r.first() == SIGINT);
  CHECK(r.on_signal(SIGINT, t0 + stop_requests::copies_window) == stop_requests::verdict::again);
}

TEST_CASE("a stop request delivered twice (process, then its group) stops once and does not exit", "[signals]") {
  const int rc = in_child([] {
    const signal_watch watch("test");
    std::atomic<int> stops{0};
    const stop_on_signal guard([&] { ++stops; });
    kill(getpid(), SIGINT);
    if (!wait_for([&] { return stops.load() == 1; })) return 10;
    std::this_thread::sleep_for(100ms);  // the copy comes after the first was taken
    kill(getpid(), SIGINT);
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(300ms);  // an exit would have happened by now
    if (stops.load() != 1) return 11;
    return watch.exit_code(0) == 130 ? 42 : 12;
  });
  CHECK(rc == 42);
}

TEST_CASE("a second stop request after the first was acknowledged exits at once with 128 + its signal",
          "[signals]") {
  const int rc = in_child([] {
    const signal_watch watch("test");
    std::atomic<int> stops{0};
    const stop_on_signal guard([&] { ++stops; });  // a stop that never finishes
    kill(getpid(), SIGINT);
    if (!wait_for([&] { return stops.load() == 1; })) return 10;
    std::this_thread::sleep_for(stop_requests::copies_window + 50ms);
    kill(getpid(), SIGTERM);
    std::this_thread::sleep_for(5s);
    return 11;  // not exited
  });
  CHECK(rc == 143);
}
