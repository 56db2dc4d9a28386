// NvtxProfiler with no NVTX tool attached (the normal case outside Nsight):
// every call must return, cost nothing observable, and work from any thread.
// test_nvtx_profiler_tool.cpp attaches a fake tool to check what is emitted.
#include <catch2/catch.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/nvtx_profiler.hpp>
#include <dflash/profile.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <type_traits>
#include <vector>

using namespace dflash::literals;
using namespace std::chrono_literals;

using keys = dflash::key_set<"forward", "pack">;
using nvtx_t = dflash::NvtxProfiler<keys>;

static_assert(dflash::ProfilerPolicy<nvtx_t>);
static_assert(dflash::ProfilerPolicy<dflash::NvtxProfiler<>>);  // any key
static_assert(nvtx_t::enabled);
static_assert(std::is_empty_v<nvtx_t> && std::is_empty_v<nvtx_t::token>);
static_assert(std::is_empty_v<dflash::profiler_ref<nvtx_t>>);  // a stage pays no size for it
static_assert(noexcept(nvtx_t{}.begin("forward"_key)));
static_assert(noexcept(nvtx_t{}.scope("pack"_key)));
static_assert(std::is_same_v<dflash::Composite<nvtx_t, dflash::AccumulatingProfiler<keys>>::keys, keys>);

TEST_CASE("with no tool attached every NVTX call returns and nests", "[nvtx]") {
  REQUIRE(std::getenv("NVTX_INJECTION64_PATH") == nullptr);  // the premise of this test
  const nvtx_t p;
  for (int i = 0; i < 1000; ++i) {
    auto outer = p.scope("forward"_key);
    auto tok = p.begin("pack"_key);
    p.end("pack"_key, tok);
  }
  p.add("pack"_key, 5us);
  p.clear();
  SUCCEED("1000 nested ranges and a mark returned");
}

TEST_CASE("NvtxProfiler rejects negative add() durations", "[nvtx]") {
  const nvtx_t p;
  CHECK_THROWS_WITH(p.add("forward"_key, -1ns), Catch::Contains("negative duration for key 'forward'"));
  CHECK_NOTHROW(p.add("forward"_key, 0ns));
}

TEST_CASE("NVTX ranges from many threads at once (first use races the lazy init)", "[nvtx]") {
  const nvtx_t p;
  std::vector<std::thread> ths;
  std::atomic<int> done{0};
  for (int t = 0; t < 4; ++t)
    ths.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        if (i % 2) {
          auto s = p.scope("forward"_key);
        } else {
          auto s = p.scope("pack"_key);
        }
      }
      done.fetch_add(1);
    });
  for (auto& th : ths) th.join();
  CHECK(done.load() == 4);
}

TEST_CASE("a Composite of NVTX and accumulating counts exactly", "[nvtx]") {
  const nvtx_t n;
  dflash::AccumulatingProfiler<keys> a;
  const dflash::Composite<nvtx_t, dflash::AccumulatingProfiler<keys>> c{n, a};
  for (int i = 0; i < 7; ++i) {
    auto s = c.scope("forward"_key);
  }
  c.add("pack"_key, 2us);
  CHECK(a.count("forward"_key) == 7);
  CHECK(a.count("pack"_key) == 1);
}
