#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <barrier>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

using namespace std::chrono_literals;
using dflash::NullProfiler;

namespace {
// Aborts the process with a message if a test body hangs (e.g. a deadlock in
// shutdown): a failure must be a failure, not a CI timeout.

template <class Pred>
void wait_until(Pred pred) {
  while (!pred()) std::this_thread::yield();  // bounded by the test's watchdog
}

// ---- stages ----------------------------------------------------------------
template <class P>
struct counter_source {  // 0, 1, ..., n-1 (n < 0: forever)
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  int n = 0;
  int next = 0;
  std::atomic<int>* produced = nullptr;
  std::optional<int> operator()() {
    if (n >= 0 && next >= n) return std::nullopt;
    if (produced) produced->fetch_add(1, std::memory_order_relaxed);
    return next++;
  }
};

template <class P>
struct square {  // thread-safe: no state
  static constexpr dflash::fixed_string name{"square"};
  using input_type = int;
  using output_type = long long;
  using keys = dflash::key_set<"square.own">;
  long long operator()(int&& x) const { return static_cast<long long>(x) * x; }
};

template <class P>
struct collect {  // single worker: records arrival order
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = long long;
  using output_type = void;
  std::vector<long long>* out = nullptr;
  void operator()(long long&& v) { out->push_back(v); }
};

template <class P>
using square_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"in_q", 4>,
                                         dflash::workers<square<P>, 4>, dflash::queue_link<"out_q", 4>, collect<P>>;
template <class P>
using ordered_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"in_q", 4>, square<P>,
                                          dflash::queue_link<"out_q", 4>, collect<P>>;
}  // namespace

namespace {
struct wrong_return {  // a source must return std::optional<output_type>
  static constexpr dflash::fixed_string name{"w"};
  using input_type = void;
  using output_type = int;
  int operator()() const { return 0; }
};
}  // namespace

TEST_CASE("Stage concept classifies sources, transforms and sinks", "[pipeline][stage]") {
  STATIC_REQUIRE(dflash::SourceStage<counter_source<NullProfiler>>);
  STATIC_REQUIRE(dflash::TransformStage<square<NullProfiler>>);
  STATIC_REQUIRE(dflash::SinkStage<collect<NullProfiler>>);
  STATIC_REQUIRE(dflash::Stage<square<NullProfiler>>);
  STATIC_REQUIRE_FALSE(dflash::Stage<int>);
  struct unnamed {
    using input_type = int;
    using output_type = int;
    int operator()(int&& x) const { return x; }
  };
  STATIC_REQUIRE_FALSE(dflash::Stage<unnamed>);
  STATIC_REQUIRE_FALSE(dflash::Stage<wrong_return>);
}

TEST_CASE("the pipeline's key set is known at compile time and independent of P", "[pipeline][keys]") {
  using keys = dflash::pipeline_keys<square_pipeline<dflash::NullProfiler>>;
  using expected =
      dflash::key_set<"source.wait", "source.work", "in_q.push_wait", "in_q.pop_wait", "square.wait", "square.work",
                      "square.own", "square.age", "square.age_clock_backwards", "out_q.push_wait", "out_q.pop_wait",
                      "sink.wait", "sink.work", "sink.age", "sink.age_clock_backwards", "sink.e2e">;
  STATIC_REQUIRE(std::is_same_v<keys, expected>);
  using prof_t = dflash::AccumulatingProfiler<keys>;
  STATIC_REQUIRE(std::is_same_v<square_pipeline<prof_t>::keys, keys>);
}

TEST_CASE("source -> 4 workers -> sink delivers every item exactly once", "[pipeline]") {
  watchdog wd("4-worker pipeline");
  std::vector<long long> got;
  square_pipeline<NullProfiler> p(counter_source<NullProfiler>{1000}, square<NullProfiler>{},
                                  collect<NullProfiler>{&got});
  p.run();
  p.join();
  REQUIRE(got.size() == 1000);
  std::multiset<long long> s(got.begin(), got.end());
  for (long long i = 0; i < 1000; ++i) REQUIRE(s.count(i * i) == 1);
  CHECK(p.link<0>().closed());
  CHECK(p.link<1>().closed());
}

TEST_CASE("one worker per stage keeps FIFO order end to end", "[pipeline]") {
  watchdog wd("ordered pipeline");
  std::vector<long long> got;
  ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{500}, square<NullProfiler>{},
                                   collect<NullProfiler>{&got});
  p.run();
  p.join();
  REQUIRE(got.size() == 500);
  for (long long i = 0; i < 500; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == i * i);
}

TEST_CASE("wait and work are recorded per stage and per queue without user code", "[pipeline][keys]") {
  watchdog wd("profiled pipeline");
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<square_pipeline<dflash::NullProfiler>>>;
  prof_t prof;
  std::vector<long long> got;
  square_pipeline<prof_t> p(prof, counter_source<prof_t>{1000}, square<prof_t>{}, collect<prof_t>{&got});
  p.run();
  p.join();
  REQUIRE(got.size() == 1000);
  const auto s = prof.snapshot();
  auto count = [&](const char* k) { return s.find(k)->count; };
  CHECK(count("source.work") == 1001);  // 1000 items + the call that said "done"
  CHECK(count("source.wait") == 1000);  // one push each
  CHECK(count("in_q.push_wait") == 1000);
  CHECK(count("in_q.pop_wait") == 1004);   // + each of 4 workers' final empty pop
  CHECK(count("square.wait") == 2004);     // pops + pushes
  CHECK(count("square.work") == 1000);
  CHECK(count("square.own") == 0);         // the stage's own key, unused by it
  CHECK(count("out_q.push_wait") == 1000);
  CHECK(count("out_q.pop_wait") == 1001);
  CHECK(count("sink.wait") == 1001);
  CHECK(count("sink.work") == 1000);
}

namespace {
template <class P>
struct indexed {  // worker-indexed call; the first 3 calls meet at a barrier
  static constexpr dflash::fixed_string name{"indexed"};
  using input_type = int;
  using output_type = long long;
  std::barrier<>* meet;
  std::mutex* m;
  std::vector<std::size_t>* first_workers;
  long long operator()(int&& x, std::size_t worker) const {
    if (x < 3) {
      {
        std::lock_guard lk(*m);
        first_workers->push_back(worker);
      }
      meet->arrive_and_wait();  // can only complete if 3 distinct workers hold an item
    }
    return x;
  }
};
template <class P>
using indexed_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"a", 2>,
                                          dflash::workers<indexed<P>, 3>, dflash::queue_link<"b", 2>, collect<P>>;
}  // namespace

TEST_CASE("workers<S, 3> runs three threads and passes each its worker index", "[pipeline]") {
  watchdog wd("worker index");
  std::barrier<> meet(3);
  std::mutex m;
  std::vector<std::size_t> first;
  std::vector<long long> got;
  indexed_pipeline<NullProfiler> p(counter_source<NullProfiler>{10}, indexed<NullProfiler>{&meet, &m, &first},
                                   collect<NullProfiler>{&got});
  p.run();
  p.join();
  CHECK(got.size() == 10);
  std::set<std::size_t> ids(first.begin(), first.end());
  CHECK(ids == std::set<std::size_t>{0, 1, 2});
}

namespace {
template <class P>
struct thrower {
  static constexpr dflash::fixed_string name{"thrower"};
  using input_type = int;
  using output_type = long long;
  int at;
  long long operator()(int&& x) const {
    if (x == at) throw std::runtime_error("boom at " + std::to_string(x));
    return x;
  }
};
template <class P>
struct throwing_sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = long long;
  using output_type = void;
  void operator()(long long&& x) const {
    if (x == 25) throw std::logic_error("sink failed");  // 5 squared
  }
};
template <class P>
using throw_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"a", 2>,
                                        dflash::workers<thrower<P>, 2>, dflash::queue_link<"b", 2>, collect<P>>;
template <class P>
using sink_throw_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"a", 2>, square<P>,
                                             dflash::queue_link<"b", 2>, throwing_sink<P>>;
}  // namespace

TEST_CASE("a throwing middle stage stops an endless pipeline; join() rethrows it", "[pipeline][error]") {
  watchdog wd("exception in a middle stage");
  std::vector<long long> got;
  throw_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1}, thrower<NullProfiler>{10},
                                 collect<NullProfiler>{&got});
  p.run();
  CHECK_THROWS_MATCHES(p.join(), std::runtime_error, Catch::Matchers::Message("boom at 10"));
  CHECK(p.cancelled());
  CHECK(p.link<0>().closed());
  CHECK(p.link<1>().closed());
  p.join();  // the error is reported once
}

TEST_CASE("a throwing sink wakes a source blocked on a full queue", "[pipeline][error]") {
  watchdog wd("exception in the sink");
  sink_throw_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1}, square<NullProfiler>{},
                                      throwing_sink<NullProfiler>{});
  p.run();
  CHECK_THROWS_AS(p.join(), std::logic_error);
}

namespace {
template <class P>
struct slow_sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = long long;
  using output_type = void;
  std::atomic<int>* consumed;
  void operator()(long long&&) const {
    std::this_thread::sleep_for(1ms);
    consumed->fetch_add(1, std::memory_order_relaxed);
  }
};
// square on its own thread only (no help-first by the source's thread), so
// that behind the slow sink both queues fill and both producers block in push.
template <class P>
struct pinned_square : square<P> {
  static constexpr bool own_threads_only = true;
};
template <class P>
using slow_pipeline = dflash::Pipeline<P, counter_source<P>, dflash::queue_link<"a", 4>, pinned_square<P>,
                                       dflash::queue_link<"b", 4>, slow_sink<P>>;
}  // namespace

// stop() latency is a behaviour bound from the issue (< 100 ms): the stages
// measured are blocked in full queues, the sink's call takes 1 ms.
TEST_CASE("stop() cancels stages blocked in queues within 100 ms", "[pipeline][stop]") {
  watchdog wd("stop(cancel)");
  std::atomic<int> produced{0}, consumed{0};
  slow_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1, 0, &produced}, pinned_square<NullProfiler>{},
                                slow_sink<NullProfiler>{&consumed});
  p.run();
  wait_until([&] { return p.link<0>().blocked_pushers() == 1 && p.link<1>().blocked_pushers() == 1; });
  const auto t0 = std::chrono::steady_clock::now();
  p.stop();
  p.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 100ms);
  CHECK(consumed.load() < produced.load());  // cancelled: queued items were dropped
}

TEST_CASE("stop(drain) stops the source and delivers everything it produced", "[pipeline][stop]") {
  watchdog wd("stop(drain)");
  std::atomic<int> produced{0}, consumed{0};
  slow_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1, 0, &produced}, pinned_square<NullProfiler>{},
                                slow_sink<NullProfiler>{&consumed});
  p.run();
  wait_until([&] { return p.link<0>().blocked_pushers() == 1 && p.link<1>().blocked_pushers() == 1; });
  const auto t0 = std::chrono::steady_clock::now();
  p.stop(dflash::stop_mode::drain);
  p.join();
  const auto took = std::chrono::steady_clock::now() - t0;
  CHECK(took < 100ms);  // about 10 queued items x 1 ms
  CHECK_FALSE(p.cancelled());
  CHECK(consumed.load() == produced.load());
}

TEST_CASE("run() twice is an error; destroying a running pipeline cancels it", "[pipeline][stop]") {
  watchdog wd("destructor");
  std::atomic<int> consumed{0};
  {
    slow_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1}, pinned_square<NullProfiler>{},
                                  slow_sink<NullProfiler>{&consumed});
    p.run();
    CHECK_THROWS_MATCHES(p.run(), std::logic_error,
                         Catch::Matchers::Message("dflash::Pipeline::run(): the pipeline was already started"));
    wait_until([&] { return consumed.load() > 0; });
  }  // ~Pipeline: cancel + join, no hang
  CHECK(consumed.load() > 0);
}

TEST_CASE("NullProfiler pipelines and queues hold no profiler state", "[pipeline][keys]") {
  using accumulating = dflash::AccumulatingProfiler<dflash::pipeline_keys<ordered_pipeline<dflash::NullProfiler>>>;
  STATIC_REQUIRE(sizeof(ordered_pipeline<accumulating>) == sizeof(ordered_pipeline<NullProfiler>) + sizeof(void*));
}

namespace {
// Captures what the process writes to stderr while `f` runs.
template <class F>
std::string stderr_of(F&& f) {
  std::fflush(stderr);
  char path[] = "/tmp/dflash_stderr_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::string text;
  char buf[512];
  lseek(fd, 0, SEEK_SET);
  for (ssize_t n; (n = read(fd, buf, sizeof buf)) > 0;) text.append(buf, static_cast<std::size_t>(n));
  close(fd);
  unlink(path);
  return text;
}
}  // namespace

TEST_CASE("join() without run() throws; a pipeline destroyed without ever running says so", "[pipeline][stop]") {
  std::vector<long long> got;
  const std::string never_run = stderr_of([&] {
    ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{10}, square<NullProfiler>{},
                                     collect<NullProfiler>{&got});
    CHECK_THROWS_MATCHES(p.join(), std::logic_error,
                         Catch::Matchers::Message("dflash::Pipeline::join(): run() was never called, so nothing "
                                                  "ran; call run() first (or run_to_completion())"));
  });
  CHECK(got.empty());
  CHECK_THAT(never_run, Catch::Contains("dflash::Pipeline: destroyed without ever being run"));
  const std::string ran = stderr_of([&] {
    ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{10}, square<NullProfiler>{},
                                     collect<NullProfiler>{&got});
    p.run_to_completion();
    p.join();  // a second join() after a run is harmless
  });
  CHECK(got.size() == 10);
  CHECK(ran.empty());
  const std::string stopped = stderr_of([&] {  // stopped on purpose before running: silent
    ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{10}, square<NullProfiler>{},
                                     collect<NullProfiler>{&got});
    p.stop();
  });
  CHECK(stopped.empty());
}

TEST_CASE("run_to_completion() runs and joins in one blocking call", "[pipeline]") {
  watchdog wd("run_to_completion");
  std::vector<long long> got;
  ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{300}, square<NullProfiler>{},
                                   collect<NullProfiler>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 300);
  CHECK(got.back() == 299LL * 299);
}

TEST_CASE("a running pipeline destroyed without join() or stop() says so; stop() first is silent",
          "[pipeline][stop]") {
  watchdog wd("forgotten join");
  std::atomic<int> consumed{0};
  const std::string forgot = stderr_of([&] {
    slow_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1}, pinned_square<NullProfiler>{},
                                  slow_sink<NullProfiler>{&consumed});
    p.run();
  });
  CHECK_THAT(forgot, Catch::Contains("destroyed while running without join() or stop()"));
  const std::string deliberate = stderr_of([&] {
    slow_pipeline<NullProfiler> p(counter_source<NullProfiler>{-1}, pinned_square<NullProfiler>{},
                                  slow_sink<NullProfiler>{&consumed});
    p.run();
    p.stop();
  });
  CHECK(deliberate.empty());
  const std::string joined = stderr_of([&] {
    std::vector<long long> got;
    ordered_pipeline<NullProfiler> p(counter_source<NullProfiler>{10}, square<NullProfiler>{},
                                     collect<NullProfiler>{&got});
    p.run();
    p.join();
  });
  CHECK(joined.empty());
}
