// pipeline_variants: the example's whole training pipeline with NullProfiler
// and with AccumulatingProfiler, same workload, same process, interleaved.
// Reports tokens/s of each (counter "tok/s") and, in BM_ratio, the
// profiled/plain throughput ratio measured pair by pair.
#include <benchmark/benchmark.h>

#include <cstdio>

#include "train.hpp"

namespace {

using namespace dflash_example;
using stats_t = dflash::AccumulatingProfiler<train_keys>;

Options workload() {
  Options o;  // the example's defaults, shorter
  o.steps = 40;
  o.quiet = true;
  o.profile_interval = 0;
  return o;
}

const Setup& setup() {
  static const Setup s(workload());
  return s;
}

Console& silent() {
  static Console c(stdout, false, true);
  return c;
}

template <bool Profiled>
RunResult run_once() {
  if constexpr (Profiled) {
    stats_t stats;
    return run_training(setup(), stats, stats, silent(), nullptr);
  } else {
    dflash::NullProfiler none;
    return run_training(setup(), none, none, silent(), nullptr);
  }
}

template <bool Profiled>
void BM_pipeline(benchmark::State& state) {
  std::int64_t tokens = 0;
  double seconds = 0;
  for (auto _ : state) {
    const RunResult r = run_once<Profiled>();
    tokens += r.log.tokens;
    seconds += r.seconds;
  }
  state.counters["tok/s"] = seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
  state.counters["steps"] = static_cast<double>(workload().steps);
}

// One plain and one profiled run per iteration: the ratio sees the same
// machine state, which separate benchmarks minutes apart do not.
void BM_ratio(benchmark::State& state) {
  double plain_s = 0, prof_s = 0;
  std::int64_t plain_tok = 0, prof_tok = 0;
  for (auto _ : state) {
    const RunResult a = run_once<false>();
    const RunResult b = run_once<true>();
    plain_tok += a.log.tokens;
    plain_s += a.seconds;
    prof_tok += b.log.tokens;
    prof_s += b.seconds;
  }
  const double plain = static_cast<double>(plain_tok) / plain_s, prof = static_cast<double>(prof_tok) / prof_s;
  state.counters["plain tok/s"] = plain;
  state.counters["profiled tok/s"] = prof;
  state.counters["profiled/plain"] = prof / plain;
}

BENCHMARK(BM_pipeline<false>)->Name("pipeline/NullProfiler")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_pipeline<true>)->Name("pipeline/AccumulatingProfiler")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK(BM_ratio)->Name("pipeline/ratio_interleaved")->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(6.0);

}  // namespace

BENCHMARK_MAIN();
