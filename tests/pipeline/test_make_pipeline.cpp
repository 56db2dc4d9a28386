// Stages as functions (types deduced), make_pipeline, in_order stages.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using dflash::NullProfiler;
using namespace std::chrono_literals;

TEST_CASE("dflash::stage<name>(f) deduces source, transform and sink types", "[pipeline][function]") {
  auto src = dflash::stage<"src">([]() -> std::optional<int> { return std::nullopt; });
  auto sq = dflash::stage<"sq">([](const int& x) { return 1.5 * x; });
  auto sink = dflash::stage<"sink">([](std::string s) { (void)s; });
  using Src = decltype(src);
  using Sq = decltype(sq);
  using Sink = decltype(sink);
  STATIC_REQUIRE(dflash::SourceStage<Src>);
  STATIC_REQUIRE(std::is_same_v<Src::output_type, int>);
  STATIC_REQUIRE(dflash::TransformStage<Sq>);
  STATIC_REQUIRE(std::is_same_v<Sq::input_type, int>);
  STATIC_REQUIRE(std::is_same_v<Sq::output_type, double>);
  STATIC_REQUIRE(dflash::SinkStage<Sink>);
  STATIC_REQUIRE(std::is_same_v<Sink::input_type, std::string>);
  STATIC_REQUIRE(Src::name.view() == "src");
  CHECK(sq(3) == 4.5);
}

namespace {
// source -> parallel<4>(jittery) -> in_order(sink): the sink must see 0, 1, 2, ...
struct ordered_run {
  int n;
  std::atomic<int> next{0};
  std::vector<long long> seen;
  auto build() {
    auto numbers = dflash::stage<"numbers">([this]() -> std::optional<int> {
      const int i = next.fetch_add(1);
      return i < n ? std::optional(i) : std::nullopt;
    });
    auto jitter = dflash::stage<"jitter">([](int x) {
      if (x % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(200 + (x % 5) * 100));
      return 10LL * x;
    });
    auto sink = dflash::stage<"sink">([this](long long v) { seen.push_back(v); });
    return [=](const auto& prof) {
      return dflash::make_pipeline(prof, numbers, dflash::queue_link<"a", 8>{}, dflash::parallel<4>(jitter),
                                   dflash::queue_link<"b", 8>{}, dflash::in_order(sink));
    };
  }
};
}  // namespace

TEST_CASE("in_order after 4 parallel workers delivers in source order, exactly once", "[pipeline][in_order]") {
  watchdog wd("in_order");
  ordered_run r{2000, {}, {}};
  auto build = r.build();
  build(NullProfiler{}).run_to_completion();
  REQUIRE(r.seen.size() == 2000);
  for (std::size_t i = 0; i < r.seen.size(); ++i) REQUIRE(r.seen[i] == 10LL * static_cast<long long>(i));

  // The same with a profiler: keys from the builder, every item counted once.
  ordered_run q{500, {}, {}};
  auto build2 = q.build();
  using keys = dflash::pipeline_keys<decltype(build2)>;
  dflash::AccumulatingProfiler<keys> prof;
  build2(prof).run_to_completion();
  REQUIRE(q.seen.size() == 500);
  for (std::size_t i = 0; i < q.seen.size(); ++i) REQUIRE(q.seen[i] == 10LL * static_cast<long long>(i));
  CHECK(prof.snapshot().find("jitter.work")->count == 500);
  CHECK(prof.snapshot().find("sink.work")->count == 500);
}

namespace {
template <class P>
struct counter {
  static constexpr dflash::fixed_string name{"counter"};
  using input_type = void;
  using output_type = int;
  int n = 0, next = 0;
  std::optional<int> operator()() { return n < 0 || next < n ? std::optional(next++) : std::nullopt; }
};
template <class P>
struct slow_odd {  // odd items take longer: a plain sink would see them late
  static constexpr dflash::fixed_string name{"slow_odd"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const {
    if (x % 2) std::this_thread::sleep_for(100us);
    return x;
  }
};
template <class P>
struct record {
  static constexpr dflash::fixed_string name{"record"};
  using input_type = int;
  using output_type = void;
  std::vector<int>* out;
  void operator()(int&& x) { out->push_back(x); }
};
template <class P>
using typed_ordered = dflash::Pipeline<P, counter<P>, dflash::queue_link<"a", 4>, dflash::workers<slow_odd<P>, 3>,
                                       dflash::queue_link<"b", 4>, dflash::in_order<record<P>>>;
}  // namespace

TEST_CASE("in_order<S> as a type; stop(drain) still delivers everything produced, in order", "[pipeline][in_order]") {
  watchdog wd("in_order drain");
  std::vector<int> got;
  typed_ordered<NullProfiler> p(counter<NullProfiler>{-1}, slow_odd<NullProfiler>{}, record<NullProfiler>{&got});
  STATIC_REQUIRE(typed_ordered<NullProfiler>::in_order_at<2>);
  p.run();
  std::this_thread::sleep_for(20ms);
  p.stop(dflash::stop_mode::drain);
  p.join();
  const int produced = p.stage<0>().next;
  REQUIRE(got.size() == static_cast<std::size_t>(produced));
  for (int i = 0; i < produced; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == i);
}

TEST_CASE("an in_order stage runs on exactly one worker", "[pipeline][in_order]") {
  auto shape = typed_ordered<NullProfiler>::default_shape();
  shape.workers[2] = 2;
  std::vector<int> got;
  CHECK_THROWS_WITH((typed_ordered<NullProfiler>(shape, counter<NullProfiler>{5}, slow_odd<NullProfiler>{},
                                                record<NullProfiler>{&got})),
                    Catch::Contains("stage 2 is in_order and runs on exactly one worker (got 2)"));
}

namespace {
template <class P>
struct shared_counter {  // a source safe to call from several workers
  static constexpr dflash::fixed_string name{"counter"};
  using input_type = void;
  using output_type = int;
  std::atomic<int>* next;
  int n;
  std::optional<int> operator()() const {
    const int i = next->fetch_add(1);
    return i < n ? std::optional(i) : std::nullopt;
  }
};
template <class P>
using multi_source_ordered =
    dflash::Pipeline<P, dflash::workers<shared_counter<P>, 3>, dflash::queue_link<"a", 4>,
                     dflash::workers<slow_odd<P>, 3>, dflash::queue_link<"b", 4>, dflash::in_order<record<P>>>;
}  // namespace

// Items are numbered once across all source workers: numbers that repeat
// (one count per worker) would make an in_order stage drop the repeats while
// the run ends normally.
TEST_CASE("in_order behind a source with several workers: every item exactly once", "[pipeline][in_order]") {
  watchdog wd("in_order, 3 source workers");
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> next{0};
    std::vector<int> got;
    multi_source_ordered<NullProfiler> p(shared_counter<NullProfiler>{&next, 1000}, slow_odd<NullProfiler>{},
                                         record<NullProfiler>{&got});
    p.run_to_completion();
    REQUIRE(got.size() == 1000);
    std::vector<int> sorted = got;
    std::sort(sorted.begin(), sorted.end());
    for (int i = 0; i < 1000; ++i) REQUIRE(sorted[static_cast<std::size_t>(i)] == i);
  }
}
