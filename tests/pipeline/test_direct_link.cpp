// direct_link: stages that run on the threads of their producers (no queue,
// no thread of their own). Exactly-once, order (in_order after the parallel
// stage, with a reorder window), errors, stop / drain, keys, shape checks.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

namespace {
struct source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  int n = 0;
  int next = 0;
  std::optional<int> operator()() { return next < n ? std::optional(next++) : std::nullopt; }
};

// Parallel: a pseudo-random delay per item, so items finish out of order.
struct jitter {
  static constexpr dflash::fixed_string name{"jitter"};
  using input_type = int;
  using output_type = int;
  int throw_at = -1;
  std::atomic<int>* max_index = nullptr;  // highest worker index seen
  int operator()(int&& x, std::size_t w) const {
    if (x == throw_at) throw std::runtime_error("jitter failed on " + std::to_string(x));
    if (max_index) {
      int m = max_index->load();
      while (static_cast<int>(w) > m && !max_index->compare_exchange_weak(m, static_cast<int>(w))) {
      }
    }
    const unsigned h = static_cast<unsigned>(x) * 2654435761u;
    if (h % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(h % 400));
    return x;
  }
};

// Serial: records what it sees, checks it is never called concurrently, and
// that it always gets worker index 0 (it has one worker, whatever thread runs it).
template <dflash::fixed_string N>
struct named_jitter : jitter {
  static constexpr dflash::fixed_string name = N;
};

struct record {
  static constexpr dflash::fixed_string name{"record"};
  using input_type = int;
  using output_type = int;
  std::vector<int>* seen;
  std::atomic<int>* inside;
  std::atomic<bool>* overlap;
  std::atomic<bool>* bad_index;
  int operator()(int&& x, std::size_t w) {
    if (inside->fetch_add(1) != 0) *overlap = true;
    if (w != 0) *bad_index = true;
    seen->push_back(x);
    inside->fetch_sub(1);
    return x;
  }
};

struct collect {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  std::vector<int>* out;
  std::mutex* m;  // null: the sink must be serial (no lock needed)
  void operator()(int&& x) {
    if (m) {
      const std::lock_guard lk(*m);
      out->push_back(x);
    } else {
      out->push_back(x);
    }
  }
};

struct checks {
  std::vector<int> seen, out;
  std::atomic<int> inside{0};
  std::atomic<bool> overlap{false}, bad_index{false};
  std::atomic<int> max_index{-1};
};

std::vector<int> iota(int n) {
  std::vector<int> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = i;
  return v;
}
}  // namespace

// source -> direct -> 4 x jitter -> direct -> in_order<record> -> direct -> sink: one segment, 4 threads.
template <class P>
using all_direct = dflash::Pipeline<P, source, dflash::direct_link<"take", 2>, dflash::workers<jitter, 4>,
                                    dflash::direct_link<"reorder", 3>, dflash::in_order<record>,
                                    dflash::direct_link<"out", 1>, collect>;

TEST_CASE("direct links: every item once, in source order after in_order, on the parallel stage's threads",
          "[pipeline][direct]") {
  watchdog wd("direct links: order");
  for (const std::size_t window : {std::size_t{1}, std::size_t{3}, std::size_t{64}}) {
    CAPTURE(window);
    checks k;
    auto shape = all_direct<dflash::NullProfiler>::default_shape();
    shape.depths[1] = window;
    all_direct<dflash::NullProfiler> p(shape, source{2000}, jitter{-1, &k.max_index},
                                       record{&k.seen, &k.inside, &k.overlap, &k.bad_index}, collect{&k.out, nullptr});
    p.run_to_completion();
    CHECK(k.seen == iota(2000));
    CHECK(k.out == iota(2000));
    CHECK_FALSE(k.overlap.load());
    CHECK_FALSE(k.bad_index.load());
    CHECK(k.max_index.load() == 3);  // the parallel stage ran on 4 workers
  }
}

TEST_CASE("direct links: a serial stage after the parallel one without in_order gets every item once",
          "[pipeline][direct]") {
  watchdog wd("direct links: unordered");
  using pipe = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 4>, dflash::workers<jitter, 3>,
                                dflash::direct_link<"to_record", 1>, record, dflash::direct_link<"to_sink", 1>, collect>;
  checks k;
  pipe p(source{3000}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index}, collect{&k.out, nullptr});
  p.run_to_completion();
  CHECK_FALSE(k.overlap.load());
  CHECK(std::set<int>(k.out.begin(), k.out.end()).size() == 3000);
  CHECK(k.out.size() == 3000);
}

TEST_CASE("direct links: an in_order stage after a queue, with its sink on its thread", "[pipeline][direct]") {
  watchdog wd("direct links: in_order head");
  using pipe = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 4>, dflash::workers<jitter, 3>,
                                dflash::queue_link<"mid", 4>, dflash::in_order<record>,
                                dflash::direct_link<"to_sink", 1>, collect>;
  checks k;
  pipe p(source{3000}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index}, collect{&k.out, nullptr});
  p.run_to_completion();
  CHECK(k.out == iota(3000));
}

TEST_CASE("direct links: a stage that throws ends the pipeline; join rethrows", "[pipeline][direct]") {
  watchdog wd("direct links: error");
  checks k;
  all_direct<dflash::NullProfiler> p(source{100000}, jitter{500, nullptr},
                                     record{&k.seen, &k.inside, &k.overlap, &k.bad_index}, collect{&k.out, nullptr});
  CHECK_THROWS_WITH(p.run_to_completion(), "jitter failed on 500");
  CHECK(k.out.size() < 100000);
  for (std::size_t i = 0; i < k.out.size(); ++i) REQUIRE(k.out[i] == static_cast<int>(i));  // still in order
}

TEST_CASE("direct links: stop(cancel) wakes threads waiting for their turn; stop(drain) delivers every item taken",
          "[pipeline][direct]") {
  watchdog wd("direct links: stop");
  {
    checks k;
    all_direct<dflash::NullProfiler> p(source{1 << 30}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index},
                                       collect{&k.out, nullptr});
    p.run();
    std::this_thread::sleep_for(20ms);
    p.stop();
    p.join();
    for (std::size_t i = 0; i < k.out.size(); ++i) REQUIRE(k.out[i] == static_cast<int>(i));
  }
  {
    checks k;
    std::atomic<int> taken{0};
    struct counting_source : source {
      std::atomic<int>* taken;
      std::optional<int> operator()() {
        auto v = source::operator()();
        if (v) taken->fetch_add(1);
        return v;
      }
    };
    using pipe = dflash::Pipeline<dflash::NullProfiler, counting_source, dflash::direct_link<"take", 2>,
                                  dflash::workers<jitter, 4>, dflash::direct_link<"reorder", 3>,
                                  dflash::in_order<record>, dflash::direct_link<"out", 1>, collect>;
    pipe p(counting_source{{1 << 30}, &taken}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index},
           collect{&k.out, nullptr});
    p.run();
    std::this_thread::sleep_for(20ms);
    p.stop(dflash::stop_mode::drain);
    p.join();
    CHECK(k.out.size() == static_cast<std::size_t>(taken.load()));  // every item taken reached the sink
    CHECK(k.out == iota(taken.load()));
  }
}

TEST_CASE("direct links: keys are recorded as for queues, the hand-over wait under <link>.push_wait",
          "[pipeline][direct][keys]") {
  watchdog wd("direct links: keys");
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<all_direct<dflash::NullProfiler>>>;
  prof_t prof;
  checks k;
  all_direct<prof_t> p(prof, source{500}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index},
                       collect{&k.out, nullptr});
  p.run_to_completion();
  const auto s = prof.snapshot();
  CHECK(s.find("source.work")->count == 501);  // + the empty call that ended it
  CHECK(s.find("jitter.work")->count == 500);
  CHECK(s.find("record.work")->count == 500);
  CHECK(s.find("sink.work")->count == 500);
  CHECK(s.find("reorder.push_wait")->count >= 500);  // one lock wait per item, plus turn waits
  CHECK(s.find("reorder.pop_wait") == nullptr);     // a direct link has no pop, and no key for one
}

TEST_CASE("direct links: shapes that a segment cannot run are rejected with a clear error", "[pipeline][direct]") {
  using two_parallel = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 4>,
                                        dflash::workers<jitter, 2>, dflash::direct_link<"d", 1>,
                                        dflash::workers<named_jitter<"jitter2">, 2>, dflash::queue_link<"out", 4>,
                                        collect>;
  CHECK_THROWS_WITH(two_parallel(two_parallel::default_shape()),
                    Catch::Contains("both have several workers"));
  auto shape = all_direct<dflash::NullProfiler>::default_shape();
  shape.workers[0] = 2;
  CHECK_THROWS_WITH(all_direct<dflash::NullProfiler>(shape), Catch::Contains("source joined by a direct_link"));
  using head = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 4>, dflash::in_order<record>,
                                dflash::direct_link<"d", 1>, dflash::workers<jitter, 2>, dflash::queue_link<"out", 4>,
                                collect>;
  CHECK_THROWS_WITH(head(head::default_shape()), Catch::Contains("starts a direct segment"));
}

namespace {
// A sink that ends the pipeline from inside its call, either way a stage can.
struct stopping_sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  int stop_at;
  bool throw_stop;  // true: throw pipeline_stop; false: call stop() on the pipeline
  std::function<void()> stop;
  std::vector<int>* out;
  void operator()(int&& x) {
    if (x == stop_at) {
      if (throw_stop) throw dflash::pipeline_stop{};
      stop();
    }
    out->push_back(x);
  }
};
}  // namespace

// A stage after the parallel one that throws (or throws pipeline_stop) while
// its thread holds the serial lock must not deadlock cancel(), nor must stop()
// called from inside such a stage.
TEST_CASE("direct links: a serial stage after the parallel one ends the pipeline from inside its call",
          "[pipeline][direct]") {
  watchdog wd("direct links: stop from the sink");
  using pipe = dflash::Pipeline<dflash::NullProfiler, source, dflash::direct_link<"take", 2>,
                                dflash::workers<jitter, 4>, dflash::direct_link<"reorder", 3>,
                                dflash::in_order<record>, dflash::direct_link<"out", 1>, stopping_sink>;
  for (const bool throw_stop : {true, false}) {
    CAPTURE(throw_stop);
    checks k;
    pipe* self = nullptr;
    pipe p(source{1 << 30}, jitter{}, record{&k.seen, &k.inside, &k.overlap, &k.bad_index},
           stopping_sink{300, throw_stop, [&] { self->stop(); }, &k.out});
    self = &p;
    p.run_to_completion();  // returns: pipeline_stop / stop() is not an error
    CHECK(k.out.size() >= 300);
    for (std::size_t i = 0; i < k.out.size(); ++i) REQUIRE(k.out[i] == static_cast<int>(i));
  }
}

namespace {
struct slow_record {
  static constexpr dflash::fixed_string name{"record"};
  using input_type = int;
  using output_type = int;
  std::atomic<bool>* failed;
  std::atomic<int>* after;
  int operator()(int&& x) {
    if (failed->load()) after->fetch_add(1);
    std::this_thread::sleep_for(5ms);
    return x;
  }
};
struct failing {
  static constexpr dflash::fixed_string name{"jitter"};
  using input_type = int;
  using output_type = int;
  std::atomic<bool>* failed;
  int operator()(int&& x) const {
    if (x == 20) {
      std::this_thread::sleep_for(2ms);  // the other workers queue up on the serial lock meanwhile
      failed->store(true);
      throw std::runtime_error("failing");
    }
    return x;
  }
};
}  // namespace

// Threads queued on the serial lock when the pipeline is cancelled make no
// further call of the serial stage.
TEST_CASE("direct links: after a failure no serial call starts", "[pipeline][direct]") {
  watchdog wd("direct links: no call after cancel");
  using pipe = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 8>, dflash::workers<failing, 4>,
                                dflash::direct_link<"to_record", 1>, slow_record, dflash::direct_link<"to_sink", 1>,
                                collect>;
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> failed{false};
    std::atomic<int> after{0};
    std::vector<int> out;
    pipe p(source{1000}, failing{&failed}, slow_record{&failed, &after}, collect{&out, nullptr});
    CHECK_THROWS_WITH(p.run_to_completion(), "failing");
    CHECK(after.load() <= 1);  // at most the call already inside when the failure came (it saw the flag)
  }
}

namespace {
struct throws_once_serial {  // serial, after the parallel stage: throws on its 10th call
  static constexpr dflash::fixed_string name{"record"};
  using input_type = int;
  using output_type = int;
  std::atomic<int>* calls;
  std::atomic<int>* after_throw;
  std::atomic<bool>* thrown;
  int operator()(int&& x) {
    if (thrown->load()) after_throw->fetch_add(1);
    if (calls->fetch_add(1) == 9) {
      thrown->store(true);
      throw std::runtime_error("serial failed");
    }
    return x;
  }
};
struct quick {
  static constexpr dflash::fixed_string name{"jitter"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return x; }
};
}  // namespace

// A serial stage that throws is never called again: the pipeline is
// cancelled before the thread that threw releases the serial lock, so a
// thread spinning on that lock cannot call the failed stage with a later item.
TEST_CASE("direct links: a serial stage that threw is never called again", "[pipeline][direct]") {
  watchdog wd("direct links: no call after a throw", std::chrono::seconds(120));
  using pipe = dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"in", 64>, dflash::workers<quick, 4>,
                                dflash::direct_link<"to_record", 1>, throws_once_serial,
                                dflash::direct_link<"to_sink", 1>, collect>;
  int late_calls = 0;
  for (int round = 0; round < 300; ++round) {
    std::atomic<int> calls{0}, after{0};
    std::atomic<bool> thrown{false};
    std::vector<int> out;
    pipe p(source{100000}, quick{}, throws_once_serial{&calls, &after, &thrown}, collect{&out, nullptr});
    CHECK_THROWS_WITH(p.run_to_completion(), "serial failed");
    late_calls += after.load();
  }
  CHECK(late_calls == 0);
}
