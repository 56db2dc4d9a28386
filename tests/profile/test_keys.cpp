#include <catch2/catch.hpp>
#include <dflash/profile.hpp>

#include <string_view>
#include <type_traits>

using namespace dflash::literals;

using keys = dflash::key_set<"queue_wait", "forward", "pack">;

static_assert(keys::size == 3);
static_assert(keys::index_of("queue_wait") == 0);
static_assert(keys::index_of("pack") == 2);
static_assert(keys::contains("forward"));
static_assert(!keys::contains("froward"));
static_assert(std::is_same_v<keys::probe, dflash::key_t<"queue_wait">>);
static_assert(std::is_empty_v<decltype("forward"_key)>);
static_assert(std::is_same_v<decltype("forward"_key), dflash::key_t<"forward">>);
static_assert(std::is_same_v<dflash::key_set_cat_t<dflash::key_set<"a">, dflash::key_set<"b", "c">>,
                             dflash::key_set<"a", "b", "c">>);

// A policy missing a member is rejected by the concept.
struct no_add {
  using keys = dflash::any_key;
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = false;
  struct token {};
  template <class K> token begin(K) const noexcept { return {}; }
  template <class K> void end(K, token) const noexcept {}
  template <class K> int scope(K) const noexcept { return 0; }
};
struct runtime_enabled : dflash::NullProfiler {
  static inline bool enabled = false;  // not a constant expression
};
struct no_keys {
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = false;
};
struct throwing_begin : dflash::NullProfiler {
  template <class K> token begin(K) const { return {}; }  // begin must be noexcept
};
static_assert(!dflash::ProfilerPolicy<no_add>);
static_assert(!dflash::ProfilerPolicy<runtime_enabled>);
static_assert(!dflash::ProfilerPolicy<no_keys>);
static_assert(!dflash::ProfilerPolicy<throwing_begin>);
static_assert(!dflash::ProfilerPolicy<int>);
static_assert(dflash::ProfilerPolicy<dflash::NullProfiler>);
static_assert(dflash::ProfilerPolicy<dflash::AccumulatingProfiler<keys>>);
static_assert(dflash::ProfilerPolicy<dflash::AccumulatingProfiler<keys, dflash::manual_clock>>);
static_assert(dflash::ProfilerPolicy<dflash::AccumulatingProfiler<keys, dflash::tsc_clock>>);
static_assert(!dflash::NullPolicy<dflash::AccumulatingProfiler<keys>>);

// A key outside the key set is a hard compile error: see compile_fail_key.cpp.

TEST_CASE("key names survive the round trip through the type system", "[keys]") {
  STATIC_REQUIRE(dflash::key<"forward">.name() == std::string_view("forward"));
  REQUIRE(keys::names[1] == "forward");
  REQUIRE(("pack"_key).name() == "pack");
}
