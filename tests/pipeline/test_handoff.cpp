// handoff<T> / handoff_sink: a pipeline's items handed to a consumer loop on a thread the
// pipeline does not own; the consumer's step is the sink's work.
#include <catch2/catch.hpp>

#include <dflash/pipeline.hpp>
#include <dflash/pipeline/handoff.hpp>
#include <dflash/profile.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "numbers_source.hpp"
#include "stress_sweep.hpp"
#include "watchdog.hpp"

using dflash::NullProfiler;
using dflash_test::numbers;

namespace {

// Throws at item `at` (never when at < 0): an error of the run the consumer must see.
struct maybe_throw {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  int at = -1;
  int operator()(int&& x) const {
    if (x == at) throw std::runtime_error("mid: item " + std::to_string(x) + " is bad");
    return x;
  }
};

template <class P>
using to_consumer = dflash::Pipeline<P, numbers, dflash::queue_link<"q", 4>, maybe_throw, dflash::queue_link<"q2", 4>,
                                     dflash::handoff_sink<"consumer", int>>;

// Runs the pipeline on its own thread and ends the handoff with the run's outcome.
struct runner {
  std::thread t;
  template <class Pipe>
  runner(Pipe& p, dflash::handoff<int>& h)
      : t([&p, &h] {
          try {
            p.run_to_completion();
            h.finish();
          } catch (...) {
            h.finish(std::current_exception());
          }
        }) {}
  ~runner() { t.join(); }
};

}  // namespace

TEST_CASE("handoff: every item reaches the consumer once, in order; next() is empty at the end", "[handoff]") {
  watchdog wd("handoff, all items");
  dflash::handoff<int> h;
  to_consumer<NullProfiler> p(numbers{200}, maybe_throw{}, dflash::handoff_sink<"consumer", int>{&h});
  std::vector<int> got;
  {
    runner r(p, h);
    while (std::optional<int> x = h.next()) got.push_back(*x);
    CHECK_FALSE(h.next().has_value());  // the end stays the end
  }
  REQUIRE(got.size() == 200);
  for (int i = 0; i < 200; ++i) CHECK(got[static_cast<std::size_t>(i)] == i);
  CHECK(h.taken() == 200);
}

TEST_CASE("handoff: the consumer's step is the sink's work, the link's wait its wait", "[handoff]") {
  watchdog wd("handoff, profile");
  using pipe = to_consumer<NullProfiler>;
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe>>;
  prof_t prof;
  dflash::handoff<int> h;
  to_consumer<prof_t> p(prof, numbers{20}, maybe_throw{}, dflash::handoff_sink<"consumer", int>{&h});
  constexpr auto step = std::chrono::milliseconds(3);
  {
    runner r(p, h);
    while (h.next()) std::this_thread::sleep_for(step);
  }
  const auto snap = prof.snapshot();
  const auto* work = snap.find("consumer.work");
  REQUIRE(work != nullptr);
  CHECK(work->count == 20);
  // Each call lasted at least the consumer's step (sleep_for never returns early).
  CHECK(work->min_ns >= static_cast<std::uint64_t>(std::chrono::nanoseconds(step).count()));
  CHECK(snap.find("consumer.wait")->count == 21);  // + the final empty pop
}

TEST_CASE("handoff: a stage's error reaches the consumer after the items before it, with its message",
          "[handoff]") {
  watchdog wd("handoff, error");
  dflash::handoff<int> h;
  to_consumer<NullProfiler> p(numbers{100}, maybe_throw{37}, dflash::handoff_sink<"consumer", int>{&h});
  std::vector<int> got;
  std::string error;
  {
    runner r(p, h);
    try {
      while (std::optional<int> x = h.next()) got.push_back(*x);
    } catch (const std::runtime_error& e) {
      error = e.what();
    }
  }
  CHECK(error == "mid: item 37 is bad");
  REQUIRE(got.size() <= 37);  // never an item at or after the failed one... (the link may cancel some before)
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == static_cast<int>(i));
  CHECK_THROWS_WITH(h.next(), "mid: item 37 is bad");  // and it stays the outcome
}

TEST_CASE("handoff: cancel from the consumer ends an endless run; next() is empty", "[handoff]") {
  watchdog wd("handoff, cancel");
  dflash::handoff<int> h;
  to_consumer<NullProfiler> p(numbers{-1}, maybe_throw{}, dflash::handoff_sink<"consumer", int>{&h});
  int n = 0;
  {
    runner r(p, h);
    while (h.next())
      if (++n == 10) h.cancel();  // mid-step: the sink's call returns, the next one stops the run
    CHECK_FALSE(h.next().has_value());
  }
  CHECK(n == 10);
  CHECK(h.taken() == 10);
  CHECK(h.cancelled());
}

TEST_CASE("handoff: cancel from another thread wakes a consumer waiting in next()", "[handoff]") {
  watchdog wd("handoff, cancel a waiting consumer");
  dflash::handoff<int> h;
  std::thread canceller([&h] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    h.cancel();
  });
  CHECK_FALSE(h.next().has_value());  // no producer at all: only the cancel ends the wait
  canceller.join();
  CHECK_THROWS_AS(h.give(1), dflash::pipeline_stop);  // a sink call after the cancel stops the run
}

TEST_CASE("handoff: a second thread in next() is a logic error that says so", "[handoff]") {
  watchdog wd("handoff, two consumers");
  dflash::handoff<int> h;
  std::thread first([&h] { (void)h.next(); });  // no producer: it waits until the cancel below
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // long enough to be waiting there
  // Should the first thread still not wait, the second next() would: this ends that wait too.
  std::promise<void> done;
  std::thread safety([&h, f = done.get_future()] {
    if (f.wait_for(std::chrono::seconds(10)) == std::future_status::timeout) h.cancel();
  });
  std::string what;
  try {
    (void)h.next();
  } catch (const std::logic_error& e) {
    what = e.what();
  }
  done.set_value();
  safety.join();
  h.cancel();
  first.join();
  CHECK(what.find("another thread is already waiting in next()") != std::string::npos);
}

// Random runs: item counts, depths, sink workers, consumer pace, a stage's throw, the consumer's
// cancel. Whatever happens: no item twice, in order with one sink worker, all of them when
// nothing stopped the run, the stage's message when it threw, and no hang.
TEST_CASE("handoff: randomized runs keep every item once, or say why", "[handoff][stress]") {
  watchdog wd("handoff, randomized", std::chrono::seconds(60));
  dflash_test::sweep("handoff", [](std::uint64_t seed, std::uint64_t index) -> std::string {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
    auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int n = pick(0, 300);
    const int throw_at = pick(0, 3) == 0 ? pick(0, n) : -1;
    const int cancel_at = pick(0, 3) == 0 ? pick(1, n + 1) : -1;
    const int sink_workers = pick(1, 2);
    const int pace = pick(0, 2);  // 0: none, 1: yield, 2: a few microseconds

    dflash::handoff<int> h;
    using pipe = to_consumer<NullProfiler>;
    auto shape = pipe::default_shape();
    shape.depths[pipe::link_index<"q">] = static_cast<std::size_t>(pick(1, 8));
    shape.depths[pipe::link_index<"q2">] = static_cast<std::size_t>(pick(1, 8));
    shape.workers[pipe::stage_index<"consumer">] = static_cast<std::size_t>(sink_workers);
    pipe p(shape, numbers{n}, maybe_throw{throw_at}, dflash::handoff_sink<"consumer", int>{&h});
    std::vector<int> got;
    std::string error;
    {
      runner r(p, h);
      try {
        while (std::optional<int> x = h.next()) {
          got.push_back(*x);
          if (static_cast<int>(got.size()) == cancel_at) h.cancel();
          if (pace == 1) std::this_thread::yield();
          if (pace == 2) std::this_thread::sleep_for(std::chrono::microseconds(pick(1, 50)));
        }
      } catch (const std::runtime_error& e) {
        error = e.what();
      }
    }
    std::vector<char> seen(static_cast<std::size_t>(n), 0);
    for (const int x : got) {
      if (x < 0 || x >= n) return "item " + std::to_string(x) + " was never made";
      if (seen[static_cast<std::size_t>(x)]++) return "item " + std::to_string(x) + " arrived twice";
    }
    if (sink_workers == 1)
      for (std::size_t i = 0; i < got.size(); ++i)
        if (got[i] != static_cast<int>(i)) return "out of order at " + std::to_string(i);
    const bool stopped = cancel_at >= 0 && cancel_at <= static_cast<int>(got.size());
    if (throw_at >= 0 && throw_at < n) {
      if (!stopped && error != "mid: item " + std::to_string(throw_at) + " is bad")
        return "the stage threw at " + std::to_string(throw_at) + " but the consumer saw '" + error + "'";
      if (seen.size() > static_cast<std::size_t>(throw_at) && seen[static_cast<std::size_t>(throw_at)])
        return "the failed item arrived";
    } else if (!error.empty()) {
      return "an error nobody threw: " + error;
    } else if (!stopped && static_cast<int>(got.size()) != n) {
      return std::to_string(got.size()) + " of " + std::to_string(n) + " items arrived in a run nobody stopped";
    }
    if (h.taken() != got.size()) return "taken() says " + std::to_string(h.taken());
    return {};
  });
}
