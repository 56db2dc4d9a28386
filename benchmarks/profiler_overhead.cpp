// Cost of one scoped timer under each policy, next to the reference cost of a
// bare pair of clock reads, measured in the same run (scripts/bench.sh turns
// these into ratios in docs/benchmarks.md). 1 and 2 threads share a profiler.
#include <benchmark/benchmark.h>
#include <dflash/profile.hpp>

#include <chrono>

using namespace dflash::literals;

namespace {

using keys = dflash::key_set<"work">;
dflash::AccumulatingProfiler<keys> steady_profiler;
dflash::AccumulatingProfiler<keys, dflash::tsc_clock> tsc_profiler;

template <class Clock>
void bare_clock_pair(benchmark::State& state) {
  for (auto _ : state) {
    auto t0 = Clock::now();
    auto t1 = Clock::now();
    benchmark::DoNotOptimize(t1 - t0);
  }
}

void baseline(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) benchmark::DoNotOptimize(++x);
}

template <class P>
void scoped_timer(benchmark::State& state, const P& prof) {
  int x = 0;
  for (auto _ : state) {
    auto t = prof.scope("work"_key);
    benchmark::DoNotOptimize(++x);
  }
}

void null_profiler(benchmark::State& state) { scoped_timer(state, dflash::NullProfiler{}); }
void accumulating_steady(benchmark::State& state) { scoped_timer(state, steady_profiler); }
void accumulating_tsc(benchmark::State& state) { scoped_timer(state, tsc_profiler); }

}  // namespace

BENCHMARK(baseline)->Threads(1)->Threads(2);
BENCHMARK(null_profiler)->Threads(1)->Threads(2);
BENCHMARK_TEMPLATE(bare_clock_pair, std::chrono::steady_clock)->Name("bare_clock_pair/steady")->Threads(1)->Threads(2);
BENCHMARK_TEMPLATE(bare_clock_pair, dflash::tsc_clock)->Name("bare_clock_pair/tsc")->Threads(1)->Threads(2);
BENCHMARK(accumulating_steady)->Threads(1)->Threads(2);
BENCHMARK(accumulating_tsc)->Threads(1)->Threads(2);

BENCHMARK_MAIN();
