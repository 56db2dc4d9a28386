#include <catch2/catch.hpp>
#include <dflash/profile.hpp>

#include <cstdint>
#include <type_traits>

using namespace dflash::literals;

static_assert(std::is_empty_v<dflash::NullProfiler>);
static_assert(std::is_empty_v<dflash::NullProfiler::scope_type>);
static_assert(std::is_empty_v<dflash::NullProfiler::token>);
static_assert(std::is_empty_v<dflash::profiler_ref<dflash::NullProfiler>>);
static_assert(!dflash::NullProfiler::enabled);

// Every member is usable in a constant expression and is noexcept.
static_assert([] {
  constexpr dflash::NullProfiler p{};
  auto t = p.begin("x"_key);
  p.end("x"_key, t);
  p.add("x"_key, std::chrono::seconds(1));
  { auto s = p.scope("x"_key); }
  return true;
}());
inline constexpr std::chrono::seconds one_second{1};
static_assert(noexcept(dflash::NullProfiler{}.add("x"_key, one_second)));
static_assert(noexcept(dflash::NullProfiler{}.scope("x"_key)));

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
}  // namespace

// The stage with NullProfiler is exactly the size of the uninstrumented one;
// with a stateful policy it holds one pointer.
static_assert(sizeof(instrumented_stage<dflash::NullProfiler>) == sizeof(uninstrumented_stage));
static_assert(sizeof(instrumented_stage<dflash::AccumulatingProfiler<dflash::key_set<"stage">>>) >
              sizeof(uninstrumented_stage));

TEST_CASE("a NullProfiler stage computes what the uninstrumented stage computes", "[null]") {
  const instrumented_stage<dflash::NullProfiler> s{{}, 3};
  const uninstrumented_stage u{3};
  for (std::uint64_t x : {0ull, 1ull, 7ull, 1ull << 40}) REQUIRE(s(x) == u(x));
}

TEST_CASE("timed() returns the callee's result under any policy", "[null]") {
  dflash::NullProfiler n;
  REQUIRE(dflash::timed(n, "k"_key, [] { return 42; }) == 42);
  dflash::AccumulatingProfiler<dflash::key_set<"k">> a;
  REQUIRE(dflash::timed(a, "k"_key, [] { return 7; }) == 7);
  REQUIRE(a.count("k"_key) == 1);
}

// A stage that declares its keys: the ref stays empty with NullProfiler, records
// through a profiler with more keys (a pipeline's), and hands itself to code
// that takes a plain profiler_ref<P> (an op) or other declared keys.
namespace {
using stage_keys = dflash::key_set<"stage", "stage.part">;
template <dflash::ProfilerPolicy P>
struct declaring_stage {
  using keys = stage_keys;
  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;
  std::uint32_t scale;
  std::uint64_t operator()(std::uint64_t x) const {
    auto t = prof->scope("stage"_key);
    auto b = prof->begin("stage.part"_key);
    prof->end("stage.part"_key, b);
    prof->add("stage.part"_key, std::chrono::nanoseconds(5));
    return x * scale;
  }
};
template <dflash::ProfilerPolicy P>
void op_with_plain_ref(dflash::profiler_ref<P> prof) {
  auto t = prof->scope("op"_key);
}
}  // namespace

static_assert(std::is_empty_v<dflash::profiler_ref<dflash::NullProfiler, stage_keys>>);
static_assert(sizeof(declaring_stage<dflash::NullProfiler>) == sizeof(uninstrumented_stage));
static_assert([] {  // usable in constant expressions, as the policy is
  constexpr dflash::profiler_ref<dflash::NullProfiler, stage_keys> r{};
  { auto s = r->scope("stage"_key); }
  return true;
}());
static_assert(std::is_same_v<dflash::profiler_ref<dflash::NullProfiler, stage_keys>::keys, stage_keys>);

TEST_CASE("a stage's declared keys: checked in every build, recorded through a wider profiler", "[null][keys]") {
  const declaring_stage<dflash::NullProfiler> n{{}, 3};
  REQUIRE(n(5) == 15);

  dflash::AccumulatingProfiler<dflash::key_set<"stage", "stage.part", "op", "other">> prof;
  const declaring_stage<decltype(prof)> s{prof, 3};
  REQUIRE(s(5) == 15);
  CHECK(prof.count("stage"_key) == 1);
  CHECK(prof.count("stage.part"_key) == 2);

  op_with_plain_ref(dflash::profiler_ref<decltype(prof)>(s.prof));  // to a ref with the profiler's keys
  CHECK(prof.count("op"_key) == 1);
  const dflash::profiler_ref<decltype(prof), dflash::key_set<"other">> narrower(s.prof);
  { auto t = narrower->scope("other"_key); }
  CHECK(prof.count("other"_key) == 1);
  CHECK(&narrower.get() == &prof);
}
