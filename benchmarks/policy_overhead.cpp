// ns per scoped timer for the optional policies — NVTX (no tool attached),
// trace, composite(accumulating + trace) — next to a bare pair of
// steady_clock reads and the accumulating policy, all in the same run.
// The trace runs a fixed number of iterations into a fresh buffer big enough
// to hold them (the recording path), and separately into a full buffer (the
// drop path), so neither number mixes the two.
#include <benchmark/benchmark.h>
#include <dflash/profile.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/nvtx_profiler.hpp>
#include <dflash/profile/trace_profiler.hpp>

#include <chrono>
#include <cstdint>

using namespace dflash::literals;

namespace {

using keys = dflash::key_set<"work">;
using acc_t = dflash::AccumulatingProfiler<keys>;
using trace_t = dflash::TraceProfiler<keys>;
constexpr std::int64_t trace_iterations = 1 << 20;  // 24 MiB of events

template <class P>
void scoped_loop(benchmark::State& state, const P& prof) {
  int x = 0;
  for (auto _ : state) {
    auto t = prof.scope("work"_key);
    benchmark::DoNotOptimize(++x);
  }
}

void bare_clock_pair(benchmark::State& state) {
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    auto t1 = std::chrono::steady_clock::now();
    benchmark::DoNotOptimize(t1 - t0);
  }
}
void null_profiler(benchmark::State& state) { scoped_loop(state, dflash::NullProfiler{}); }
void composite_empty(benchmark::State& state) { scoped_loop(state, dflash::Composite<dflash::NullProfiler>{}); }
void accumulating(benchmark::State& state) {
  static const acc_t p;
  scoped_loop(state, p);
}
void nvtx_no_tool(benchmark::State& state) { scoped_loop(state, dflash::NvtxProfiler<keys>{}); }
void trace_recording(benchmark::State& state) {
  const trace_t p(trace_iterations);
  scoped_loop(state, p);
  if (p.dropped() != 0) state.SkipWithError("trace buffer overflowed: the number would mix in drops");
}
void trace_full_buffer(benchmark::State& state) {
  const trace_t p(1);
  { auto t = p.scope("work"_key); }  // the only slot is now taken
  scoped_loop(state, p);
}
void composite_accumulating_trace(benchmark::State& state) {
  const acc_t a;
  const trace_t t(trace_iterations);
  const dflash::Composite<acc_t, trace_t> c{a, t};
  scoped_loop(state, c);
  if (t.dropped() != 0) state.SkipWithError("trace buffer overflowed");
}

}  // namespace

BENCHMARK(bare_clock_pair);
BENCHMARK(null_profiler);
BENCHMARK(composite_empty);
BENCHMARK(accumulating);
BENCHMARK(nvtx_no_tool);
BENCHMARK(trace_recording)->Iterations(trace_iterations)->Repetitions(5)->ReportAggregatesOnly(true);
BENCHMARK(trace_full_buffer);
BENCHMARK(composite_accumulating_trace)->Iterations(trace_iterations)->Repetitions(5)->ReportAggregatesOnly(true);

BENCHMARK_MAIN();
