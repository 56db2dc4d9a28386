// Pipeline throughput against the bound set by its slowest stage.
//
// Synthetic stages of known cost shaped like the real case: source (batches)
// -> 4 target workers -> postprocess -> HS queue (depth 60) -> train loop.
// Costs are sleeps (the real stages wait on the GPU; the CPU is mostly idle),
// with timer slack set to 1 us so a sleep overshoots by microseconds, not 50.
// bound = 1 / max_i(cost_i / workers_i); efficiency = measured / bound.
// The accumulating variant also reports the bound from *measured* stage work
// time, which separates pipeline loss from sleep overshoot.
// A second benchmark runs trivial stages to measure the per-item overhead.
//   bench_pipeline --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

using namespace std::chrono_literals;

namespace {
void work_for(std::chrono::microseconds d) {
  thread_local const bool slack = [] { return prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL) == 0; }();
  (void)slack;
  std::this_thread::sleep_for(d);
}

constexpr auto source_cost = 100us, target_cost = 2000us, post_cost = 300us, train_cost = 800us;
constexpr std::size_t target_workers = 4;
constexpr int items = 300;

struct batch {
  int id;
};

template <class P>
struct batches {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = batch;
  int next = 0, n = items;
  std::chrono::microseconds cost = source_cost;
  std::optional<batch> operator()() {
    if (next == n) return std::nullopt;
    if (cost.count()) work_for(cost);
    return batch{next++};
  }
};
template <class P, dflash::fixed_string Name>
struct timed_stage {
  static constexpr dflash::fixed_string name = Name;
  using input_type = batch;
  using output_type = batch;
  std::chrono::microseconds cost;
  batch operator()(batch&& b) const {
    if (cost.count()) work_for(cost);
    return b;
  }
};
template <class P>
struct train {
  static constexpr dflash::fixed_string name{"train"};
  using input_type = batch;
  using output_type = void;
  std::chrono::microseconds cost = train_cost;
  long long* sum;
  void operator()(batch&& b) const {
    if (cost.count()) work_for(cost);
    *sum += b.id;
  }
};

template <class P>
using train_pipeline =
    dflash::Pipeline<P, batches<P>, dflash::queue_link<"batch_queue", 8>,
                     dflash::workers<timed_stage<P, "target">, target_workers>, dflash::queue_link<"post_queue", 8>,
                     timed_stage<P, "post">, dflash::queue_link<"hs_queue", 60>, train<P>>;
using acc = dflash::AccumulatingProfiler<dflash::pipeline_keys<train_pipeline<dflash::NullProfiler>>>;

double seconds(std::chrono::microseconds d) { return std::chrono::duration<double>(d).count(); }

template <class P>
void run_once(const P& prof, int n, bool costly, long long& sum) {
  const auto c = [costly](std::chrono::microseconds d) { return costly ? d : 0us; };
  train_pipeline<P> p(prof, batches<P>{0, n, c(source_cost)}, timed_stage<P, "target">{c(target_cost)},
                      timed_stage<P, "post">{c(post_cost)}, train<P>{c(train_cost), &sum});
  p.run();
  p.join();
}

template <class P>
void BM_pipeline_vs_bound(benchmark::State& state) {
  P prof;
  long long sum = 0;
  for (auto _ : state) run_once(prof, items, true, sum);
  benchmark::DoNotOptimize(sum);
  const double bound = 1.0 / std::max({seconds(source_cost), seconds(target_cost) / target_workers,
                                       seconds(post_cost), seconds(train_cost)});
  state.SetItemsProcessed(state.iterations() * items);
  state.counters["bound_items/s"] = bound;
  // kIsRate divides by the run's wall time: (items / bound) / seconds = rate / bound.
  state.counters["efficiency"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * items / bound, benchmark::Counter::kIsRate);
  if constexpr (P::enabled) {
    const auto s = prof.snapshot();
    auto mean_s = [&](const char* k) { return s.find(k)->mean_ns() / 1e9; };
    const double measured_bound = 1.0 / std::max({mean_s("source.work"), mean_s("target.work") / target_workers,
                                                  mean_s("post.work"), mean_s("train.work")});
    state.counters["measured_bound_items/s"] = measured_bound;
    state.counters["train.work_ms"] = mean_s("train.work") * 1e3;
    state.counters["train.wait_ms"] = mean_s("train.wait") * 1e3;
  }
}

// Trivial stages: what the pipeline itself costs per item (queues, threads, timing).
template <class P>
void BM_pipeline_overhead(benchmark::State& state) {
  P prof;
  long long sum = 0;
  constexpr int n = 100'000;
  for (auto _ : state) run_once(prof, n, false, sum);
  benchmark::DoNotOptimize(sum);
  state.SetItemsProcessed(state.iterations() * n);
}
}  // namespace

BENCHMARK_TEMPLATE(BM_pipeline_vs_bound, dflash::NullProfiler)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_TEMPLATE(BM_pipeline_vs_bound, acc)->UseRealTime()->Unit(benchmark::kMillisecond)->MinTime(2.0);
BENCHMARK_TEMPLATE(BM_pipeline_overhead, dflash::NullProfiler)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(BM_pipeline_overhead, acc)->UseRealTime()->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
