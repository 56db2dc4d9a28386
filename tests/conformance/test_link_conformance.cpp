// The link-kind conformance suite: what every link kind promises (pipeline/link.hpp,
// pipeline/endpoint.hpp), checked the same way for each shipped kind and for one
// written here, in the spirit of oneTBB's test/conformance beside its own tests.
// A kind joins with one line in `kinds`; its harness follows from its answers
// (link_conformance.hpp). mpi::net_link runs the same cases under mpirun
// (test_net_link_conformance.cpp).
//
// Per kind: every unit once (or the declared ratio), FIFO per producer thread;
// an empty run; a drain delivers every item the source made; a cancel ends
// promptly with nothing twice; a throwing consumer fails the run with its
// error; the keys the kind declares are recorded; the layout the analysis sees
// is the kind's model, and the what-if analysis refuses where it has none.
#include <catch2/catch.hpp>
#include <dflash/analysis.hpp>
#include <dflash/profile.hpp>
#include <dflash/queue/bounded_queue.hpp>

#include "link_conformance.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <thread>
#include <tuple>
#include <utility>

using namespace std::chrono_literals;
using conformance::run_state;
using conformance::unit;

namespace {

// A kind written outside the library: it passes every K-th item pushed and
// drops the others, and says so (delivers_ratio<1, K>). Its push() does more
// than store, so it does not let the producer call the consumer (endpoint.hpp).
template <class Item, class P, dflash::fixed_string Name, std::size_t K>
class every_kth_endpoint {
 public:
  every_kth_endpoint(std::size_t depth, const P& prof) : q_(depth, prof) {}
  bool push(Item&& x) {
    if (n_.fetch_add(1, std::memory_order_relaxed) % K != 0) return true;  // dropped, as declared
    return q_.push(std::move(x));
  }
  std::optional<Item> pop() { return q_.pop(); }
  void close() noexcept { q_.close(); }

 private:
  dflash::bounded_queue<Item, P, Name> q_;
  std::atomic<std::uint64_t> n_{0};
};

template <dflash::fixed_string Name, std::size_t Depth, std::size_t K>
struct every_kth_link : dflash::link_answers<Name, Depth, dflash::consumer_on_own_threads, dflash::carries_values,
                                             /*crosses_processes=*/false, dflash::analysis::model_kind::queue> {
  using delivery = dflash::delivers_ratio<1, K>;
  static constexpr dflash::analysis::link_model model(const dflash::analysis::link_facts& f) noexcept {
    return {dflash::analysis::model_kind::queue, f.depth, 1, K, false, {}};
  }
  template <class Item, class P>
  using endpoint = every_kth_endpoint<Item, P, Name, K>;
  template <class Item, class P, class Ctx>
  static std::unique_ptr<endpoint<Item, P>> open(const Ctx& c) {
    return std::make_unique<endpoint<Item, P>>(c.depth, c.prof);
  }
  template <class E>
  static void cancel(E& e) noexcept {
    e.close();
  }
};

}  // namespace

// Every link kind the suite runs: a new kind joins with one line.
using kinds = std::tuple<dflash::queue_link<"link", 4>,                    //
                         dflash::direct_link<"link", 4>,                   //
                         dflash::device_link<"link", 4>,                   //
                         dflash::device_queue_link<"link", 64, 1, 8>,      //
                         dflash::device_queue_link<"link", 64, 1, 8, dflash::full_batches>,  //
                         every_kth_link<"link", 4, 3>>;

static_assert(std::apply([](auto... k) { return (dflash::PipelineLink<decltype(k)> && ...); }, kinds{}));

namespace {

template <class L>
using ratio = conformance::ratio<L>;

// Units that arrived: none twice, each one the source made, FIFO per (producer,
// consumer) worker pair. Returns how many arrived.
std::size_t check_no_duplicates_fifo(const run_state& st) {
  std::set<int> seen;
  std::map<std::pair<std::size_t, std::size_t>, int> last;
  for (const unit& u : st.got) {
    INFO("unit " << u.value << " from producer " << u.producer << " to consumer " << u.consumer);
    REQUIRE(u.value >= 0);
    REQUIRE(u.value < st.produced.load());
    REQUIRE(seen.insert(u.value).second);  // never twice
    auto [it, fresh] = last.try_emplace({u.producer, u.consumer}, u.value);
    if (!fresh) {
      REQUIRE(u.value > it->second);  // FIFO per producer thread
      it->second = u.value;
    }
  }
  return seen.size();
}

// After a normal end or a drain: every item the source made arrived once, or
// the declared share of them (a remainder of one group either way).
template <class L>
void check_complete(const run_state& st) {
  const std::size_t n = check_no_duplicates_fifo(st);
  const auto made = static_cast<std::size_t>(st.produced.load());
  if constexpr (ratio<L>::out == ratio<L>::in) {
    CHECK(n == made);
  } else {
    const std::size_t expect = made * ratio<L>::out / ratio<L>::in;
    INFO(n << " arrived of " << made << " made; declared " << ratio<L>::out << " per " << ratio<L>::in);
    CHECK(n + ratio<L>::out >= expect);
    CHECK(n <= expect + ratio<L>::out);
  }
}

// Waits (bounded) until `k` units arrived.
bool wait_arrived(const run_state& st, int k) {
  const auto until = std::chrono::steady_clock::now() + 20s;
  while (st.arrived.load(std::memory_order_acquire) < k)
    if (std::chrono::steady_clock::now() > until) return false;
    else std::this_thread::sleep_for(1ms);
  return true;
}

}  // namespace

TEMPLATE_LIST_TEST_CASE("a link kind delivers every unit once (or its declared ratio), FIFO per producer",
                        "[conformance]", kinds) {
  watchdog dog("conformance: exactly once", 60s);
  for (const int items : {0, 1, 600}) {
    INFO(items << " items");
    run_state st;
    st.items = items;
    auto p = conformance::make<dflash::NullProfiler, TestType>(st);
    p.run_to_completion();
    CHECK(st.produced == items);
    check_complete<TestType>(st);
  }
}

TEMPLATE_LIST_TEST_CASE("a drain through a link kind delivers every item the source made", "[conformance]", kinds) {
  watchdog dog("conformance: drain", 60s);
  run_state st;
  st.items = -1;  // endless: the drain ends it
  auto p = conformance::make<dflash::NullProfiler, TestType>(st);
  p.run();
  REQUIRE(wait_arrived(st, 40));
  p.stop(dflash::stop_mode::drain);
  p.join();
  check_complete<TestType>(st);
}

TEMPLATE_LIST_TEST_CASE("a cancel through a link kind ends the run, nothing twice", "[conformance]", kinds) {
  watchdog dog("conformance: cancel", 60s);
  run_state st;
  st.items = -1;
  auto p = conformance::make<dflash::NullProfiler, TestType>(st);
  p.run();
  REQUIRE(wait_arrived(st, 40));
  p.stop(dflash::stop_mode::cancel);
  p.join();
  check_no_duplicates_fifo(st);
}

TEMPLATE_LIST_TEST_CASE("a consumer that throws behind a link kind fails the run with its error", "[conformance]",
                        kinds) {
  watchdog dog("conformance: a throwing consumer", 60s);
  run_state st;
  st.items = 2000;
  st.throw_at = 100;  // the consumer's first unit at or past 100 throws (a ratio kind may skip 100 itself)
  auto p = conformance::make<dflash::NullProfiler, TestType>(st);
  p.run();
  REQUIRE_THROWS_WITH(p.join(), Catch::Contains("consumer failed at item"));
  check_no_duplicates_fifo(st);
}

TEMPLATE_LIST_TEST_CASE("a link kind records the keys it declares, and the analysis sees its model", "[conformance]",
                        kinds) {
  watchdog dog("conformance: keys and layout", 60s);
  using pipe = conformance::pipeline_for<dflash::NullProfiler, TestType>;
  using prof_t = dflash::AccumulatingProfiler<dflash::pipeline_keys<pipe>>;
  prof_t prof;
  run_state st;
  st.items = 600;
  auto p = conformance::make<prof_t, TestType>(prof, st);
  p.run_to_completion();
  const auto snap = prof.snapshot();
  for (const std::string_view k : TestType::keys::names) {
    INFO("key " << k);
    const auto* s = snap.find(std::string(k));
    REQUIRE(s != nullptr);
    CHECK(s->count > 0);
  }

  const auto lay = p.layout();
  REQUIRE(lay.links.size() == 2);
  const auto& l = lay.links[1];
  const dflash::analysis::link_model m = dflash::link_model_of<TestType>({TestType::depth, 0, 0});
  CHECK(l.name == TestType::name.view());
  CHECK(l.kind == m.kind);
  CHECK(l.depth == m.depth);
  CHECK(l.items_out == ratio<TestType>::out);
  CHECK(l.items_in == ratio<TestType>::in);
  CHECK(l.items_out == m.items_out);
  CHECK(l.items_in == m.items_in);
  CHECK(l.crosses_processes == TestType::crosses_processes);
  CHECK(l.no_model == m.no_model);
  // The what-if analysis predicts only across links it models, each item once.
  const auto cm = dflash::analysis::calibrate(snap, lay);
  if (!m.modelled() || m.items_out != m.items_in) CHECK_THAT(cm.why_not, Catch::Contains("no model for link 'link'"));
  else CHECK_THAT(cm.why_not, !Catch::Contains("no model"));
}
