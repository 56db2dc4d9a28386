// The pipeline's topology as pure compile-time functions (topology.hpp), and
// the test of the link-kind design: a link kind written here, in one place,
// that the pipeline runs without knowing it.
#include <catch2/catch.hpp>

#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile/accumulating_profiler.hpp>

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "watchdog.hpp"

namespace {

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
struct slot : dflash::device_item<B> {
  int v = 0;
};

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  int n = 0, end = 1000;
  std::optional<int> operator()() { return n < end ? std::optional<int>(n++) : std::nullopt; }
};
struct twice {
  static constexpr dflash::fixed_string name{"twice"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return 2 * x; }
};
struct fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = slot;
  void operator()(int&& x, slot& s, DS) { s.v = x; }
};
struct read {
  static constexpr dflash::fixed_string name{"read"};
  using input_type = slot;
  using output_type = int;
  int operator()(slot& s, DS) { return s.v; }
};
struct collect {
  static constexpr dflash::fixed_string name{"collect"};
  using input_type = int;
  using output_type = void;
  std::vector<int> got;
  void operator()(int&& x) { got.push_back(x); }
};

using T = dflash::detail::topology<numbers, dflash::queue_link<"a", 4>, dflash::workers<twice, 3>,
                                   dflash::direct_link<"b", 2>, dflash::in_order<collect>>;
static_assert(T::stage_count == 3 && T::link_count == 2);
static_assert(std::is_same_v<T::stage_type<1>, twice> && T::workers_of<1> == 3 && T::workers_of<2> == 1);
static_assert(!T::in_order_at<0> && !T::in_order_at<1> && T::in_order_at<2>);
static_assert(!T::direct_at<0> && T::direct_at<1>);
static_assert(!T::direct_in<1>() && T::direct_out<1>() && T::direct_in<2>());
static_assert(T::segment_first<2>() == 1 && T::segment_last<1>() == 2 && T::segment_last<0>() == 0);
static_assert(!T::has_device_links && T::sequenced && !T::device_stage<0> && !T::device_stage<2>);
// 3 stages x wait/work + the queue link's push/pop waits + the direct link's push_wait (it has no
// pop), and the flow rows: 2 stages x age/age_clock_backwards + the sink's e2e
static_assert(dflash::detail::topology_keys<T>::type::size == 9 + 5);
// What a kind's check<Site>() sees of the place it was put in (link_site.hpp).
using site0 = dflash::link_site<T, 0>;
using site1 = dflash::link_site<T, 1>;
static_assert(std::is_same_v<site0::producer, numbers> && std::is_same_v<site0::consumer, twice>);
static_assert(site0::producer_is_source && !site0::consumer_is_sink && site1::consumer_is_sink);
static_assert(site0::consumer_workers == 3 && site0::in_order_downstream && !site0::consumer_in_order);
static_assert(site1::consumer_in_order && site1::numbered && !site1::carries_pending && !site1::crosses_processes);
static_assert(!site1::source_reaches_consumer_directly);  // the queue link before stage 1 ends the segment

using D = dflash::detail::topology<numbers, dflash::queue_link<"in", 2>, fill, dflash::device_link<"dev", 2>, read,
                                   dflash::queue_link<"out", 2>, collect>;
static_assert(D::has_device_links && std::is_same_v<D::backend_type, B> && !D::sequenced);
static_assert(!D::device_stage<0> && D::device_stage<1> && D::device_stage<2> && !D::device_stage<3>);
static_assert(D::slots_at<1> && !D::slots_at<0> && D::output_slot<1>() && D::input_slot<2>());
static_assert(D::pending_at<2> && !D::pending_at<0> && !D::pending_at<1>);
static_assert(dflash::link_site<D, 2>::carries_pending && dflash::link_site<D, 2>::producer_on_device &&
              !dflash::link_site<D, 2>::consumer_on_device && !dflash::link_site<D, 0>::in_order_downstream);
// the device stages' keys include "<stage>.gpu" and "<stage>.launch", and (both after the source)
// "<stage>.age_gpu_end"
static_assert(dflash::detail::topology_keys<D>::type::size == 4 * 2 + 2 * 2 + 3 * 2 + 3 * 2 + 1 + 2);
static_assert(dflash::detail::topology_keys<D>::type::contains("fill.launch") &&
              dflash::detail::topology_keys<D>::type::contains("read.launch"));
static_assert(dflash::detail::topology_keys<D>::type::contains("fill.age_gpu_end") &&
              dflash::detail::topology_keys<D>::type::contains("read.age_gpu_end"));

// A link kind written by a user: a host queue that also counts what crossed
// it. Nothing in the pipeline names it; it answers the PipelineLink questions.
std::atomic<int> opened{0};
template <class Item, class P>
struct counting_queue : dflash::bounded_queue<Item, P, "counted"> {
  using dflash::bounded_queue<Item, P, "counted">::bounded_queue;
  std::atomic<int> pushed{0};
  bool push(Item&& x) {
    const bool ok = dflash::bounded_queue<Item, P, "counted">::push(std::move(x));
    pushed.fetch_add(ok ? 1 : 0, std::memory_order_relaxed);
    return ok;
  }
};
struct counted_link {
  static constexpr dflash::fixed_string name{"counted"};
  static constexpr std::size_t depth = 3;
  using keys = dflash::queue_keys<name>;
  using consumer_threads = dflash::consumer_on_own_threads;
  using carries = dflash::carries_values;
  using delivery = dflash::delivers_each_once;
  static constexpr bool crosses_processes = false;
  // (no model(): the analysis is told it has none, below)
  template <class Item, class P>
  using endpoint = counting_queue<Item, P>;
  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    opened.fetch_add(1);
    return std::make_unique<endpoint<Item, P>>(c.depth, c.prof);
  }
  template <class E>
  static void close(E& e) noexcept {
    e.close();
  }
  template <class E>
  static void cancel(E& e) noexcept {
    e.close();
  }
  template <class Site>
  static consteval bool check() {
    return true;
  }
};
static_assert(dflash::PipelineLink<counted_link>);
static_assert(!dflash::PipelineLink<twice>);

}  // namespace

TEST_CASE("a link kind the library does not know runs in a pipeline: exactly once, in order, keys recorded") {
  watchdog dog("a user-written link kind", std::chrono::seconds(60));
  using pipe_of = dflash::Pipeline<dflash::NullProfiler, numbers, counted_link, dflash::workers<twice, 4>,
                                   dflash::queue_link<"out", 8>, dflash::in_order<collect>>;
  opened = 0;
  pipe_of p;
  p.run_to_completion();
  CHECK(opened == 1);
  CHECK(p.link<0>().pushed == 1000);
  const auto& got = p.stage<2>().got;
  REQUIRE(got.size() == 1000);
  for (int i = 0; i < 1000; ++i) REQUIRE(got[static_cast<std::size_t>(i)] == 2 * i);

  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe_of>>;
  prof_t prof;
  dflash::Pipeline<prof_t, numbers, counted_link, dflash::workers<twice, 4>, dflash::queue_link<"out", 8>,
                   dflash::in_order<collect>>
      q(prof);
  q.run_to_completion();
  const auto s = prof.snapshot();
  CHECK(s.find("counted.push_wait")->count == 1000);
  CHECK(s.find("counted.pop_wait")->count == 1004);  // + each of 4 workers' final empty pop
  CHECK(q.layout().links[0].name == "counted");
  CHECK_THAT(q.layout().links[0].no_model, Catch::Contains("answers no model"));
}
