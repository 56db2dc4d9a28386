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
