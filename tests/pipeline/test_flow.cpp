// Flow tracking: with a policy that stamps items (item.hpp) every item carries
// its source time and sequence number over every link kind and through
// workers and in_order stages, giving "<stage>.age" and "<sink>.e2e"; with
// NullProfiler (or a policy with flow = false) links carry the user's type.
#include <catch2/catch.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#include <dflash/profile/trace_profiler.hpp>

#include "numbers_source.hpp"
#include "trace_check.hpp"
#include "watchdog.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

using namespace std::chrono_literals;
using dflash::NullProfiler;

namespace {
using clk = dflash::manual_clock;

template <class P>
using numbers = dflash_test::numbers;
// Advances the manual clock by `step` in its call; `back_at` sets it 1 ms back instead.
template <class P>
struct mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  clk::duration step{5000};
  int back_at = -1;
  int operator()(int&& x) const {
    if (x == back_at) clk::set(clk::now() - 1ms);
    else clk::advance(step);
    return x;
  }
};
template <class P>
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  std::vector<int>* got;
  void operator()(int&& x) const {
    clk::advance(clk::duration{7000});
    got->push_back(x);
  }
};

template <class P>
using direct_chain = dflash::Pipeline<P, numbers<P>, dflash::direct_link<"a", 4>, mid<P>, dflash::direct_link<"b", 4>,
                                      sink<P>>;
template <class P>
using queue_chain = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"a", 4>, dflash::workers<mid<P>, 3>,
                                     dflash::queue_link<"b", 4>, dflash::in_order<sink<P>>>;
template <class P>
using plain_chain =
    dflash::Pipeline<P, numbers<P>, dflash::queue_link<"a", 4>, mid<P>, dflash::queue_link<"b", 4>, sink<P>>;

using keys = dflash::pipeline_keys<plain_chain<NullProfiler>>;
using prof_t = dflash::AccumulatingProfiler<keys, clk>;
// A stateful policy that opts out of flow tracking.
struct unflowed : prof_t {
  static constexpr bool flow = false;
};

template <class L>
using element_of = typename L::value_type;

// Zero cost: with NullProfiler a link's element is the user's type itself.
static_assert(std::is_same_v<element_of<plain_chain<NullProfiler>::link_type<0>>, int>);
static_assert(std::is_same_v<element_of<plain_chain<NullProfiler>::link_type<1>>, int>);
static_assert(sizeof(element_of<plain_chain<NullProfiler>::link_type<0>>) == sizeof(int));
static_assert(std::is_same_v<element_of<plain_chain<unflowed>::link_type<0>>, int>);
static_assert(!dflash::FlowPolicy<NullProfiler> && !dflash::FlowPolicy<unflowed> && dflash::FlowPolicy<prof_t>);
// Profiled: the stamp travels in the envelope.
static_assert(std::is_same_v<element_of<plain_chain<prof_t>::link_type<0>>,
                             dflash::detail::sequenced<int, dflash::flow_stamp>>);
// in_order without profiling: only the sequence number.
static_assert(std::is_same_v<element_of<queue_chain<NullProfiler>::link_type<1>>, dflash::detail::sequenced<int>>);

const dflash::key_stats& row(const dflash::profile_snapshot& s, std::string_view k) {
  const auto* r = s.find(k);
  REQUIRE(r != nullptr);
  return *r;
}
}  // namespace

TEST_CASE("one thread: ages and end-to-end times are exact on a manual clock", "[pipeline][flow]") {
  watchdog wd("flow direct chain");
  clk::set(clk::time_point{clk::duration{1'000'000}});
  prof_t prof;
  std::vector<int> got;
  direct_chain<prof_t> p(prof, numbers<prof_t>{20}, mid<prof_t>{}, sink<prof_t>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 20);
  const auto s = prof.snapshot();
  CHECK(row(s, "mid.age").count == 20);
  CHECK(row(s, "mid.age").max_ns == 0);  // mid starts the item as the source hands it over
  CHECK(row(s, "sink.age").count == 20);
  CHECK(row(s, "sink.age").min_ns == 5000);
  CHECK(row(s, "sink.age").max_ns == 5000);
  CHECK(row(s, "sink.e2e").count == 20);
  CHECK(row(s, "sink.e2e").min_ns == 12000);
  CHECK(row(s, "sink.e2e").max_ns == 12000);
  CHECK(row(s, "sink.age_clock_backwards").count == 0);
}

TEST_CASE("a clock set back counts under age_clock_backwards, never as an age", "[pipeline][flow]") {
  watchdog wd("flow clock backwards");
  clk::set(clk::time_point{clk::duration{1'000'000'000}});
  prof_t prof;
  std::vector<int> got;
  direct_chain<prof_t> p(prof, numbers<prof_t>{10}, mid<prof_t>{clk::duration{5000}, 3}, sink<prof_t>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 10);
  const auto s = prof.snapshot();
  // item 3: the sink's start and its end both read the clock 1 ms behind the birth stamp
  CHECK(row(s, "sink.age_clock_backwards").count == 2);
  CHECK(row(s, "sink.age").count == 9);
  CHECK(row(s, "sink.e2e").count == 9);
  CHECK(row(s, "sink.e2e").max_ns < 1'000'000);  // no wrapped negative age
}

TEST_CASE("stamps cross queues, parallel workers and an in_order stage", "[pipeline][flow]") {
  watchdog wd("flow queue chain");
  clk::set(clk::time_point{clk::duration{0}});
  prof_t prof;
  std::vector<int> got;
  queue_chain<prof_t> p(prof, numbers<prof_t>{500}, mid<prof_t>{}, sink<prof_t>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 500);
  for (int i = 0; i < 500; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == i);
  const auto s = prof.snapshot();
  CHECK(row(s, "mid.age").count == 500);
  CHECK(row(s, "sink.age").count == 500);
  CHECK(row(s, "sink.e2e").count == 500);
  // every item passed mid (+5 µs) after its birth, and the sink adds 7 µs
  CHECK(row(s, "sink.age").min_ns >= 5000);
  CHECK(row(s, "sink.e2e").min_ns >= 12000);
  CHECK(row(s, "sink.age_clock_backwards").count == 0);
}

TEST_CASE("cancel and drain with stamps in flight", "[pipeline][flow]") {
  watchdog wd("flow cancel");
  for (auto mode : {dflash::stop_mode::cancel, dflash::stop_mode::drain}) {
    prof_t prof;
    std::vector<int> got;
    queue_chain<prof_t> p(prof, numbers<prof_t>{1 << 30}, mid<prof_t>{}, sink<prof_t>{&got});
    p.run();
    while (prof.snapshot().find("sink.e2e")->count < 50) std::this_thread::yield();
    p.stop(mode);
    p.join();
    const auto s = prof.snapshot();
    CHECK(row(s, "sink.e2e").count == got.size());
    for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got[i] == static_cast<int>(i));
  }
}

// ---- device links (the asynchronous host twin) ----
namespace {
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
struct dslot : dflash::device_item<B> {
  int value = -1;
};
template <class P>
struct fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = dslot;
  void operator()(int&& x, dslot& out, const DS&) const {
    clk::advance(clk::duration{3000});
    out.value = x;
  }
};
template <class P>
struct readout {
  static constexpr dflash::fixed_string name{"read"};
  using input_type = dslot;
  using output_type = int;
  int operator()(dslot& in, const DS&) const {
    clk::advance(clk::duration{2000});
    return in.value;
  }
};
template <class P>
using device_chain = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, fill<P>, dflash::device_link<"dev", 3>,
                                      readout<P>, dflash::queue_link<"out", 4>, sink<P>>;
using dev_prof = dflash::AccumulatingProfiler<dflash::pipeline_keys<device_chain<NullProfiler>>, clk>;
// The device item itself carries no stamp: the slot is the user's type.
static_assert(std::is_same_v<device_chain<dev_prof>::link_type<1>, dflash::device_channel<dslot, dev_prof, "dev">>);
}  // namespace

TEST_CASE("stamps cross a device link beside the slot and a pending host link", "[pipeline][flow][device]") {
  watchdog wd("flow device chain");
  clk::set(clk::time_point{clk::duration{0}});
  dev_prof prof;
  std::vector<int> got;
  device_chain<dev_prof> p(prof, numbers<dev_prof>{200}, fill<dev_prof>{}, readout<dev_prof>{}, sink<dev_prof>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 200);
  const auto s = prof.snapshot();
  CHECK(row(s, "fill.age").count == 200);
  CHECK(row(s, "read.age").count == 200);
  CHECK(row(s, "read.age").min_ns >= 3000);  // fill's call came between birth and read
  CHECK(row(s, "sink.age").min_ns >= 5000);
  CHECK(row(s, "sink.e2e").count == 200);
  CHECK(row(s, "sink.e2e").min_ns >= 12000);
}

// ---- a device stage's age when its device work ended (the host twin runs the work later, on its own thread) ----
namespace {
template <class P>
struct slow_fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = dslot;
  void operator()(int&& x, dslot& out, const DS& ds) const {
    out.value = x;
    ds.enqueue([] { std::this_thread::sleep_for(3ms); });
  }
};
template <class P>
struct slow_read {
  static constexpr dflash::fixed_string name{"read"};
  using input_type = dslot;
  using output_type = int;
  int operator()(dslot& in, const DS& ds) const {
    ds.enqueue([] { std::this_thread::sleep_for(2ms); });
    return in.value;
  }
};
template <class P>
using slow_chain = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, slow_fill<P>, dflash::device_link<"dev", 3>,
                                    slow_read<P>, dflash::queue_link<"out", 4>, sink<P>>;
using slow_keys = dflash::pipeline_keys<slow_chain<NullProfiler>>;
// Device stages after the source have the row; host stages and the source do not.
static_assert(slow_keys::contains("fill.age_gpu_end") && slow_keys::contains("read.age_gpu_end"));
static_assert(!slow_keys::contains("numbers.age_gpu_end") && !slow_keys::contains("sink.age_gpu_end"));
}  // namespace

TEST_CASE("a device stage's age when its device work ended: after the work, before the sink", "[pipeline][flow][device]") {
  watchdog wd("flow age_gpu_end");
  using prof = dflash::AccumulatingProfiler<slow_keys>;  // steady_clock: the host twin's device time is real time
  prof pr;
  std::vector<int> got;
  slow_chain<prof> p(pr, numbers<prof>{30}, slow_fill<prof>{}, slow_read<prof>{}, sink<prof>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 30);
  const auto s = pr.snapshot();
  // every item's device work was followed to its end, none read behind its birth
  CHECK(row(s, "fill.age_gpu_end").count == 30);
  CHECK(row(s, "read.age_gpu_end").count == 30);
  CHECK(row(s, "fill.age_clock_backwards").count == 0);
  CHECK(row(s, "read.age_clock_backwards").count == 0);
  // the work ran after the item was born (3 ms in fill, 2 ms more in read); an end never reads early
  CHECK(row(s, "fill.age_gpu_end").min_ns >= 3'000'000);
  CHECK(row(s, "read.age_gpu_end").min_ns >= 5'000'000);
  // and it ended before the sink's call on the item ended (the sink waits for read's work); an
  // end reads late by up to the anchor's poll (µs, more on an overloaded machine: 10 ms allowed)
  CHECK(row(s, "read.age_gpu_end").max_ns <= row(s, "sink.e2e").max_ns + 10'000'000);
  // each end is at least the device time of the stage's own work after the item's age at its start
  CHECK(row(s, "fill.age_gpu_end").total_ns >= row(s, "fill.age").total_ns + row(s, "fill.gpu").total_ns / 2);
}

// ---- the trace: ranges on tracks, device time on stream tracks, flows from source to sink ----
namespace {
using json = nlohmann::json;
template <class P>
using traced_chain =
    dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, dflash::workers<fill<P>, 2>,
                     dflash::device_link<"dev", 3>, readout<P>, dflash::queue_link<"out", 4>, sink<P>>;
using trace_keys = dflash::pipeline_keys<traced_chain<NullProfiler>>;
}  // namespace

TEST_CASE("trace: .gpu on stream tracks, no partial overlap, one item followed from source to sink",
          "[pipeline][flow][trace]") {
  watchdog wd("flow trace");
  using tp = dflash::TraceProfiler<trace_keys>;
  tp trace;
  std::vector<int> got;
  traced_chain<tp> p(trace, numbers<tp>{100}, fill<tp>{}, readout<tp>{}, sink<tp>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 100);
  REQUIRE(trace.dropped() == 0);
  const json t = json::parse(trace.json());
  const auto r = dflash_test::check_trace(t);
  for (const auto& problem : r.problems) FAIL_CHECK(problem);
  REQUIRE(r.problems.empty());
  const auto& paths = r.paths;
  auto names = r.track_names;
  REQUIRE(paths.size() == 100);
  const std::vector<std::string> expected{"numbers.work", "fill.work", "read.work", "sink.work"};
  for (const auto& [id, path] : paths) {
    INFO("item " << id);
    REQUIRE(path == expected);
  }
  // device time sits on the worker's stream track, never on its thread's own
  std::size_t gpu = 0;
  for (const auto& e : t["traceEvents"])
    if (e["ph"] == "X" && (e["name"] == "fill.gpu" || e["name"] == "read.gpu")) {
      ++gpu;
      const std::string track = names[e["tid"].get<std::uint64_t>()];
      INFO(track);
      REQUIRE(track.size() > 7);
      REQUIRE(track.substr(track.size() - 7) == " stream");
      REQUIRE(track.rfind(e["name"] == "fill.gpu" ? "fill#" : "read#", 0) == 0);
    }
  CHECK(gpu == 200);
  // flow rows are item lifetimes, not ranges
  for (const auto& e : t["traceEvents"]) REQUIRE(e["name"] != "sink.e2e");
}
