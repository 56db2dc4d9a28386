// Source pull (pipeline/agents/source_pull.hpp): a thread of the stage after
// the first queue link that finds it empty calls a cheap one-worker source
// itself, and the source's own thread parks meanwhile. Every item once, one
// call at a time; the rows count every item as a push and a pop; the end,
// drain, cancel, errors and a source that turns slow or blocks all end the run
// as they did with the source on its own thread; a source with several workers,
// or own_threads_only, keeps its own threads.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "collect_sink.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dflash::NullProfiler;

namespace {

template <class Pred>
void wait_until(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(100us);  // bounded by the test's watchdog
}

// What a run saw; the source's fields have one writer at a time (a seat per index).
struct seen {
  std::thread::id own;  // the source's own thread: its first call is always there
  int calls = 0, off_own = 0, off_own_while_slow = 0, on_own_while_slow = 0, off_own_after = 0;
  bool blocked_on_own = false;
  std::atomic<int> produced{0};
  std::mutex m;
  std::vector<int> got;
};

enum class turn { none, slow, block, throw_error, stop };

// 0, 1, ..., n-1 (n < 0: endless); cheap, except where `t` says otherwise for calls [at, at + span).
template <bool OwnThreadsOnly = false>
struct counting_source {
  static constexpr dflash::fixed_string name{"source"};
  static constexpr bool own_threads_only = OwnThreadsOnly;
  using input_type = void;
  using output_type = int;
  seen* s;
  int n;
  turn t = turn::none;
  int at = 0, span = 0;
  std::atomic<bool>* release = nullptr;  // turn::block: the call at `at` waits for it
  int next = 0;
  static inline std::atomic<bool> blocked{false};  // turn::block: that call has begun
  std::optional<int> operator()() {
    if (s->calls++ == 0) s->own = std::this_thread::get_id();
    const bool own = std::this_thread::get_id() == s->own;
    if (!own) ++s->off_own;
    if (n >= 0 && next >= n) return std::nullopt;
    const bool turned = next >= at && next < at + span;
    if (!own && next >= at + span) ++s->off_own_after;
    if (turned && t == turn::slow) {
      (own ? s->on_own_while_slow : s->off_own_while_slow) += 1;
      std::this_thread::sleep_for(300us);
    }
    if (t == turn::block && next == at) {
      s->blocked_on_own = own;
      blocked.store(true);  // after the flag: the test reads the flag once it sees this
      wait_until([&] { return release->load(); });
    }
    if (t == turn::throw_error && next == at) throw std::runtime_error("source failed at " + std::to_string(at));
    if (t == turn::stop && next == at) throw dflash::pipeline_stop{};
    s->produced.fetch_add(1);
    return next++;
  }
};
struct mid {  // slow enough that the source's link runs empty and its threads pull
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  std::chrono::microseconds pause{50};
  int operator()(int&& x) const {
    std::this_thread::sleep_for(pause);
    return x;
  }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  seen* s;
  void operator()(int&& x) const {
    const std::lock_guard lk(s->m);
    s->got.push_back(x);
  }
};
template <class P, class Src = counting_source<>>
using chain = dflash::Pipeline<P, Src, dflash::queue_link<"q1", 2>, dflash::workers<mid, 2>, dflash::queue_link<"q2", 4>,
                               sink>;

// Every value in [0, n) exactly once.
bool each_once(std::vector<int> v, int n) {
  std::sort(v.begin(), v.end());
  if (static_cast<int>(v.size()) != n) return false;
  for (int i = 0; i < n; ++i)
    if (v[static_cast<std::size_t>(i)] != i) return false;
  return true;
}
}  // namespace

TEST_CASE("source pull: a cheap source is called by the next stage's threads", "[pipeline][help][pull]") {
  watchdog wd("source pull, cheap source");
  constexpr int n = 2000;
  seen s;
  chain<NullProfiler> p(counting_source<>{&s, n}, mid{}, sink{&s});
  p.run_to_completion();
  CHECK(each_once(s.got, n));
  // Its first calls run on its own thread (its cost is unknown until then);
  // once sampled cheap, mid's threads call it when q1 is empty. (How many
  // depends on the build: a sanitizer's timed calls may sample slow now and then.)
  CHECK(s.off_own > 0);
}

TEST_CASE("source pull: the rows count every item, whichever thread called the source", "[pipeline][help][pull]") {
  watchdog wd("source pull, rows");
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<chain<NullProfiler>>>;
  constexpr int n = 2000;
  prof_t prof;
  seen s;
  chain<prof_t> p(prof, counting_source<>{&s, n}, mid{}, sink{&s});
  p.run_to_completion();
  CHECK(each_once(s.got, n));
  // (Whether a timed call samples below 1 us depends on the build: a sanitizer's may not.)
  INFO(s.off_own << " of " << n << " calls on mid's threads");
  const auto snap = prof.snapshot();
  auto count = [&](const char* k) { return snap.find(k)->count; };
  CHECK(count("source.work") == n + 1);  // + the one call that said "done"
  CHECK(count("source.wait") == n);      // one push or hand-over each
  CHECK(count("q1.push_wait") == n);
  CHECK(count("q1.pop_wait") == n + 2);  // + each of mid's 2 threads' final empty pop
  CHECK(count("mid.wait") == 2 * n + 2);
  CHECK(count("mid.work") == n);
  CHECK(count("q2.push_wait") == n);
  CHECK(count("sink.work") == n);
  if constexpr (dflash::FlowPolicy<prof_t>) {
    CHECK(count("mid.age") == n);
    CHECK(count("sink.e2e") == n);
  }
}

TEST_CASE("source pull: a source with own_threads_only is called on its own thread only", "[pipeline][help][pull]") {
  watchdog wd("source pull, own threads only");
  constexpr int n = 500;
  seen s;
  chain<NullProfiler, counting_source<true>> p(counting_source<true>{&s, n}, mid{}, sink{&s});
  p.run_to_completion();
  CHECK(each_once(s.got, n));
  CHECK(s.off_own == 0);
}

namespace {
// Worker w makes w * 10000 + k for k < quota[w], then says done (its own
// end, not the others'): one index's values rise, so each mid index must see
// them rise, and the run ends only when every index is done.
struct indexed_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  const int* quota;
  int* next;                  // per index: one call per index at a time
  std::thread::id* thread;    // per index: the thread of its first call
  std::atomic<int>* moved;    // calls of an index on another thread than its first
  std::optional<int> operator()(std::size_t w) const {
    if (next[w] == 0 && thread[w] == std::thread::id{}) thread[w] = std::this_thread::get_id();
    if (thread[w] != std::this_thread::get_id()) moved->fetch_add(1);
    if (next[w] >= quota[w]) return std::nullopt;
    return static_cast<int>(w) * 10000 + next[w]++;
  }
};
struct indexed_mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  std::atomic<int>* busy;  // per mid index
  int (*last)[3];          // per mid index and source index (under the index's busy flag)
  std::atomic<int>* broken;
  int operator()(int&& x, std::size_t w) const {
    if (busy[w].exchange(1) != 0) broken->fetch_add(1);  // two calls on one index
    int& l = last[w][x / 10000];
    if (x < l) broken->fetch_add(1);  // an index got a source index's older item after a newer one
    l = x;
    if (x % 7 == 0) std::this_thread::sleep_for(20us);
    busy[w].store(0);
    return x;
  }
};
using value_sink = dflash_test::collect<int, "sink">;
using indexed_chain = dflash::Pipeline<NullProfiler, dflash::workers<indexed_source, 3>, dflash::queue_link<"q1", 2>,
                                       dflash::workers<indexed_mid, 3>, dflash::queue_link<"q2", 4>, value_sink>;
}  // namespace

// Several source workers' calls may wait for one another (a barrier, one
// index's input made by another): a consumer thread in one index's call would
// leave the other indices' own threads parked, so such a source is not pulled.
TEST_CASE("source pull: a source with several workers keeps its own threads; every item once, in order per index",
          "[pipeline][help][pull]") {
  for (const auto& quota : {std::array<int, 3>{0, 5, 3000}, std::array<int, 3>{3000, 0, 0},
                            std::array<int, 3>{1000, 1500, 2000}}) {
    watchdog wd("source pull, several source workers");
    int next[3] = {0, 0, 0};
    std::thread::id thread[3] = {};
    std::atomic<int> busy[3] = {0, 0, 0}, broken{0}, moved{0};
    int last[3][3];
    for (auto& l : last) std::fill(std::begin(l), std::end(l), -1);
    std::vector<int> got;
    indexed_chain p(indexed_source{quota.data(), next, thread, &moved}, indexed_mid{busy, last, &broken},
                    value_sink{&got});
    p.run_to_completion();
    CHECK(broken.load() == 0);
    CHECK(moved.load() == 0);
    std::size_t total = 0;
    for (int q : quota) total += static_cast<std::size_t>(q);
    REQUIRE(got.size() == total);
    std::sort(got.begin(), got.end());
    CHECK(std::adjacent_find(got.begin(), got.end()) == got.end());
    for (std::size_t w = 0; w < 3; ++w) CHECK(next[w] == quota[w]);
  }
}

TEST_CASE("source pull: drain and cancel end a run whose source's thread is parked", "[pipeline][help][pull]") {
  for (const auto mode : {dflash::stop_mode::drain, dflash::stop_mode::cancel}) {
    watchdog wd(mode == dflash::stop_mode::drain ? "source pull, drain" : "source pull, cancel");
    seen s;
    chain<NullProfiler> p(counting_source<>{&s, -1}, mid{}, sink{&s});
    p.run();
    wait_until([&] { return s.produced.load() > 500; });  // sampled cheap long since: mid's threads call it
    p.stop(mode);
    p.join();
    const std::lock_guard lk(s.m);
    if (mode == dflash::stop_mode::drain) CHECK(each_once(s.got, s.produced.load()));  // nothing in a link is lost
    else CHECK(static_cast<int>(s.got.size()) <= s.produced.load());
  }
}

TEST_CASE("source pull: a source that turns slow goes back to its own thread, and comes back", "[pipeline][help][pull]") {
  watchdog wd("source pull, a source that turns slow");
  constexpr int n = 1500;
  seen s;
  chain<NullProfiler> p(counting_source<>{&s, n, turn::slow, 500, 200}, mid{}, sink{&s});
  p.run_to_completion();
  CHECK(each_once(s.got, n));
  // Two slow samples (one call in 8 is timed) stop the pulls; the own thread
  // takes over, and once it has sampled cheap calls again, the pulls resume.
  CHECK(s.on_own_while_slow > 0);
  CHECK(s.off_own_while_slow < 50);
  CHECK(s.off_own_after > 0);
}

TEST_CASE("source pull: while a pulled call blocks, the other threads wait parked in the link",
          "[pipeline][help][pull]") {
  watchdog wd("source pull, a blocking call");
  constexpr int n = 1000;
  seen s;
  std::atomic<bool> release{false};
  chain<NullProfiler> p(counting_source<>{&s, n, turn::block, 600, 1, &release}, mid{}, sink{&s});
  p.run();
  // A thread of mid's in the source's call: the other finds no free seat and
  // parks in q1 (a spinning one would never count as blocked there); the
  // source's own thread in the call: both park there.
  wait_until([&] { return counting_source<>::blocked.load(); });
  const std::size_t parked = s.blocked_on_own ? 2 : 1;
  wait_until([&] { return p.link<0>().blocked_poppers() == parked; });
  release = true;
  p.join();
  CHECK(each_once(s.got, n));
}

TEST_CASE("source pull: a pulled call that throws fails the run; pipeline_stop ends it", "[pipeline][help][pull]") {
  SECTION("an error") {
    watchdog wd("source pull, a throw");
    seen s;
    chain<NullProfiler> p(counting_source<>{&s, -1, turn::throw_error, 1000, 1}, mid{}, sink{&s});
    p.run();
    CHECK_THROWS_WITH(p.join(), "source failed at 1000");
    CHECK(s.off_own > 0);
  }
  SECTION("pipeline_stop") {
    watchdog wd("source pull, pipeline_stop");
    seen s;
    chain<NullProfiler> p(counting_source<>{&s, -1, turn::stop, 1000, 1}, mid{}, sink{&s});
    p.run();
    CHECK_NOTHROW(p.join());
    CHECK(s.produced.load() == 1000);
  }
}

namespace {
// Two source workers whose every 64th calls meet at a barrier (the others are
// cheap, so the source samples cheap).
struct lockstep_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  std::barrier<>* meet;
  int* next;  // per index
  int rounds;
  std::optional<int> operator()(std::size_t w) const {
    if (next[w] >= rounds) return std::nullopt;
    if (next[w] % 64 == 63) meet->arrive_and_wait();
    return static_cast<int>(w) * 10000 + next[w]++;
  }
};
struct quick_mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const {
    std::this_thread::sleep_for(20us);  // the link runs empty between the source's rounds
    return x;
  }
};
using lockstep_chain = dflash::Pipeline<NullProfiler, dflash::workers<lockstep_source, 2>, dflash::queue_link<"q1", 2>,
                                        quick_mid, dflash::queue_link<"q2", 4>, value_sink>;
}  // namespace

// Had mid's one thread called index 0 while both own threads slept, it would
// wait at the barrier for an index 1 nobody calls (the run would hang).
TEST_CASE("source pull: source workers whose calls wait for one another finish", "[pipeline][help][pull]") {
  watchdog wd("source pull, source workers in lockstep");
  constexpr int rounds = 2000;
  std::barrier<> meet(2);
  int next[2] = {0, 0};
  std::vector<int> got;
  lockstep_chain p(lockstep_source{&meet, next, rounds}, quick_mid{}, value_sink{&got});
  p.run_to_completion();
  CHECK(got.size() == 2u * rounds);
}
