// One AccumulatingProfiler zone (scope: two clock reads +
// record) against a bare pair of reads of the same clock, interleaved rounds
// in one process. ns per zone; ratio = profiler / bare pair (target: <= 1.15 with
// the TSC clock).
//   compare_profiler [--rounds=N]
#include <dflash/profile.hpp>

#include <chrono>
#include <cstdint>

#include "compare.hpp"

using namespace dflash::literals;

namespace {
using keys = dflash::key_set<"work">;
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
  cmp.write(argc, argv);
}
