#include <catch2/catch.hpp>
#include <dflash/profile.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/trace_profiler.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using namespace dflash::literals;
using namespace std::chrono_literals;
using dflash::Composite;
using dflash::manual_clock;
using dflash::NullProfiler;

using keys = dflash::key_set<"forward", "pack">;
using acc_t = dflash::AccumulatingProfiler<keys, manual_clock>;
using trace_t = dflash::TraceProfiler<keys, manual_clock>;

namespace {
struct uninstrumented_stage {
  std::uint32_t scale;
  std::uint64_t operator()(std::uint64_t x) const { return x * scale; }
};
template <dflash::ProfilerPolicy P>
struct instrumented_stage {
  [[no_unique_address]] dflash::profiler_ref<P> prof;
  std::uint32_t scale;
  std::uint64_t operator()(std::uint64_t x) const {
    auto t = prof->scope("stage"_key);
    return x * scale;
  }
};

// A policy that logs its calls, to observe forwarding order.
struct call_log {
  std::vector<std::string>* log;
};
template <int Id>
struct logging_profiler {
  using keys = dflash::any_key;
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = true;
  struct token {
    int id;
  };
  struct scope_type {
    const logging_profiler* p;
    ~scope_type() { p->log->push_back("scope-end " + std::to_string(Id)); }
  };
  std::vector<std::string>* log;
  template <dflash::Key K>
  token begin(K) const noexcept {
    log->push_back("begin " + std::to_string(Id));
    return {Id};
  }
  template <dflash::Key K>
  void end(K, token t) const noexcept {
    log->push_back("end " + std::to_string(Id) + " token " + std::to_string(t.id));
  }
  template <dflash::Key K>
  scope_type scope(K) const noexcept {
    return {this};
  }
  template <dflash::Key K, class R, class Pd>
  void add(K, std::chrono::duration<R, Pd> d) const {
    log->push_back("add " + std::to_string(Id) + " " +
                   std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count()));
  }
};
}  // namespace

// ---- zero cost: empty, disabled, same stage size as no instrumentation -----
static_assert(std::is_empty_v<Composite<>>);
static_assert(std::is_empty_v<Composite<NullProfiler>>);
static_assert(std::is_empty_v<Composite<NullProfiler, NullProfiler>>);
static_assert(!Composite<>::enabled && !Composite<NullProfiler>::enabled);
static_assert(dflash::NullPolicy<Composite<>> && dflash::NullPolicy<Composite<NullProfiler>>);
static_assert(std::is_empty_v<Composite<>::scope_type<dflash::key_t<"x">>>);
static_assert(std::is_empty_v<Composite<NullProfiler>::token_t<dflash::key_t<"x">>>);
static_assert(std::is_empty_v<dflash::profiler_ref<Composite<NullProfiler>>>);
static_assert(sizeof(instrumented_stage<Composite<>>) == sizeof(uninstrumented_stage));
static_assert(sizeof(instrumented_stage<Composite<NullProfiler>>) == sizeof(uninstrumented_stage));
static_assert(sizeof(instrumented_stage<NullProfiler>) == sizeof(instrumented_stage<Composite<NullProfiler>>));
// Usable in constant expressions, like NullProfiler.
static_assert([] {
  constexpr Composite<NullProfiler> c{};
  auto t = c.begin("x"_key);
  c.end("x"_key, t);
  c.add("x"_key, 1s);
  { auto s = c.scope("x"_key); }
  return true;
}());
inline constexpr std::chrono::seconds one_second{1};
static_assert(noexcept(Composite<>{}.add("x"_key, one_second)));
static_assert(noexcept(Composite<NullProfiler>{}.scope("x"_key)));

// ---- keys and enabled ------------------------------------------------------
using both_t = Composite<acc_t, trace_t>;
static_assert(dflash::ProfilerPolicy<both_t>);
static_assert(both_t::enabled);
static_assert(std::is_same_v<both_t::keys, keys>);
static_assert(std::is_same_v<Composite<NullProfiler, acc_t>::keys, keys>);
static_assert(std::is_same_v<Composite<NullProfiler>::keys, dflash::any_key>);
static_assert(Composite<NullProfiler, acc_t>::enabled);
// Intersection, in the first enabled set's order.
using ab_t = dflash::AccumulatingProfiler<dflash::key_set<"a", "b", "c">>;
using cb_t = dflash::AccumulatingProfiler<dflash::key_set<"c", "d", "b">>;
static_assert(std::is_same_v<Composite<ab_t, cb_t>::keys, dflash::key_set<"b", "c">>);
static_assert(std::is_same_v<Composite<cb_t, ab_t>::keys, dflash::key_set<"c", "b">>);
static_assert(std::is_same_v<Composite<logging_profiler<0>, ab_t>::keys, dflash::key_set<"a", "b", "c">>);
// A stateful composite holds one pointer per stateful member, none for empty ones.
static_assert(sizeof(Composite<acc_t, NullProfiler, trace_t>) == 2 * sizeof(void*));
static_assert(!std::is_empty_v<both_t>);

TEST_CASE("a Composite forwards exact counts and durations to two AccumulatingProfilers", "[composite]") {
  manual_clock::set(manual_clock::time_point{});
  acc_t a, b;
  const Composite<acc_t, acc_t> c{a, b};
  REQUIRE(&c.get<0>() == &a);
  REQUIRE(&c.get<1>() == &b);
  for (auto d : {4ms, 1ms, 2ms}) {
    auto t = c.scope("forward"_key);
    manual_clock::advance(d);
  }
  auto tok = c.begin("pack"_key);
  manual_clock::advance(300us);
  c.end("pack"_key, tok);
  c.add("pack"_key, 700us);

  for (const acc_t* p : {&a, &b}) {
    const auto s = p->snapshot();
    const auto& f = *s.find("forward");
    CHECK(f.count == 3);
    CHECK(f.total_ns == 7'000'000);
    CHECK(f.min_ns == 1'000'000);
    CHECK(f.max_ns == 4'000'000);
    const auto& pk = *s.find("pack");
    CHECK(pk.count == 2);
    CHECK(pk.total_ns == 1'000'000);
    CHECK(pk.min_ns == 300'000);
    CHECK(pk.max_ns == 700'000);
  }
}

TEST_CASE("a Composite of accumulating and trace feeds both from one scope", "[composite]") {
  manual_clock::set(manual_clock::time_point{std::chrono::microseconds(10)});
  acc_t a;
  trace_t tr;
  const both_t c{a, tr};
  {
    auto t = c.scope("forward"_key);
    manual_clock::advance(5us);
  }
  CHECK(a.count("forward"_key) == 1);
  CHECK(a.snapshot().keys[0].total_ns == 5'000);
  const auto j = nlohmann::json::parse(tr.json());
  int x = 0;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") {
      ++x;
      CHECK(e["name"] == "forward");
      CHECK(e["ts"].get<double>() == 10.0);
      CHECK(e["dur"].get<double>() == 5.0);
    }
  CHECK(x == 1);
}

TEST_CASE("a Composite begins first to last, ends last to first, and passes each member its own token",
          "[composite]") {
  std::vector<std::string> log;
  const logging_profiler<1> p1{&log};
  const logging_profiler<2> p2{&log};
  const Composite<logging_profiler<1>, NullProfiler, logging_profiler<2>> c{p1, NullProfiler{}, p2};
  { auto s = c.scope("k"_key); }
  c.add("k"_key, 3ns);
  const std::vector<std::string> want{"begin 1", "begin 2", "end 2 token 2", "end 1 token 1", "add 1 3", "add 2 3"};
  CHECK(log == want);
}

TEST_CASE("a Composite forwards add() errors from its members", "[composite]") {
  acc_t a, b;
  const Composite<acc_t, acc_t> c{a, b};
  CHECK_THROWS_AS(c.add("forward"_key, -1ms), std::invalid_argument);
  CHECK(a.count("forward"_key) == 0);
  CHECK(b.count("forward"_key) == 0);
}

TEST_CASE("a stage holding Composite<NullProfiler> computes what the uninstrumented stage computes", "[composite]") {
  const instrumented_stage<Composite<NullProfiler>> s{{}, 3};
  const uninstrumented_stage u{3};
  for (std::uint64_t x : {0ull, 5ull, 1ull << 40}) REQUIRE(s(x) == u(x));
}

// Members that share a clock get one clock read per begin and one per end,
// not one each (a composite zone costs one clock pair).
namespace {
struct counting_clock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::duration<rep, period>;
  using time_point = std::chrono::time_point<counting_clock>;
  [[maybe_unused]] static constexpr bool is_steady = true;  // a Clock has it; nothing reads it here
  static inline std::atomic<rep> reads{0};
  static time_point now() noexcept { return time_point{duration{100 * ++reads}}; }
};
}  // namespace

TEST_CASE("Composite reads a shared clock once per begin and once per end", "[composite]") {
  using K = dflash::key_set<"a">;
  dflash::AccumulatingProfiler<K, counting_clock> acc;
  dflash::TraceProfiler<K, counting_clock> trace;
  dflash::Composite<dflash::AccumulatingProfiler<K, counting_clock>, dflash::NullProfiler,
                    dflash::TraceProfiler<K, counting_clock>>
      both(acc, dflash::NullProfiler{}, trace);
  counting_clock::reads = 0;
  { auto s = both.scope("a"_key); }
  CHECK(counting_clock::reads.load() == 2);
  const auto st = acc.snapshot();
  CHECK(st.keys[0].count == 1);
  CHECK(st.keys[0].total_ns == 100);  // the same interval the trace got
  CHECK(trace.json().find("\"dur\":0.100") != std::string::npos);
}
