// One AccumulatingProfiler zone (scope: two clock reads +
// record) against a bare pair of reads of the same clock, interleaved rounds
// in one process. ns per zone; ratio = profiler / bare pair (target: <= 1.10 with
// the TSC clock). And what flow tracking adds to a stage's zone: a pipeline
// with flow on also records the item's age as the stage starts it (one clock
// read and one record, pipeline_core::since_born), so "zone + age" against
// "zone" is a stage's profiling cost per item with flow tracking on and off.
//   compare_profiler [--rounds=N]
#include <dflash/profile.hpp>

#include <chrono>
#include <cstdint>

#include "compare.hpp"

using namespace dflash::literals;

namespace {
using keys = dflash::key_set<"work", "work.age">;
constexpr int iters = 2'000'000;

template <class F>
double ns_per(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / iters;
}

template <class Clock>
double bare_pair() {
  std::int64_t sink = 0;
  const double r = ns_per([&] {
    for (int i = 0; i < iters; ++i) {
      const auto t0 = Clock::now();
      asm volatile("" ::: "memory");
      sink += (Clock::now() - t0).count();
    }
  });
  asm volatile("" : : "r"(sink));
  return r;
}

template <class P>
double zone(const P& p) {
  return ns_per([&] {
    for (int i = 0; i < iters; ++i) {
      auto s = p.scope("work"_key);
      asm volatile("" ::: "memory");
    }
  });
}
// A stage's profiling with flow tracking on: the age of an item born
// `born_ns` ago, then the zone around its work.
template <class P>
double zone_and_age(const P& p) {
  using clock = typename P::clock;
  const std::int64_t born = std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
  return ns_per([&] {
    for (int i = 0; i < iters; ++i) {
      const std::int64_t now =
          std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now().time_since_epoch()).count();
      p.add("work.age"_key, std::chrono::nanoseconds{now - born});
      auto s = p.scope("work"_key);
      asm volatile("" ::: "memory");
    }
  });
}
}  // namespace

int main(int argc, char** argv) {
  dflash_bench::comparison cmp{"profiler", "ns/zone", {}, {}};
  const int rounds = dflash_bench::rounds_arg(argc, argv, 9);
  static dflash::AccumulatingProfiler<keys, dflash::tsc_clock> tsc_prof;
  static dflash::AccumulatingProfiler<keys> steady_prof;
  cmp.run("TSC clock", {{"AccumulatingProfiler<tsc_clock>", [] { return zone(tsc_prof); }},
                        {"bare tsc_clock pair", [] { return bare_pair<dflash::tsc_clock>(); }}},
          rounds);
  cmp.run("steady_clock", {{"AccumulatingProfiler<steady_clock>", [] { return zone(steady_prof); }},
                           {"bare steady_clock pair", [] { return bare_pair<std::chrono::steady_clock>(); }}},
          rounds);
  cmp.run("TSC clock, stage per item", {{"flow tracking on: zone + age", [] { return zone_and_age(tsc_prof); }},
                                       {"flow tracking off: zone", [] { return zone(tsc_prof); }}},
          rounds);
  cmp.write(argc, argv);
}
