// dflash::Pipeline against tbb::parallel_pipeline on the same stages, in one
// process, rounds interleaved (the order of the three subjects rotates each round):
//   source -> 2 parallel workers x W us busy work -> serial in-order S us -> sink
// dflash twice: stages joined by queues (a thread per worker), and by direct
// links (the segment runs on the two workers' threads, as TBB runs its filters).
// for 2000 items, W/S = 50/20 us ("work"), and for 100000 items 0/0 ("zero-cost
// stages": per-item hand-off cost; at 2000 items thread start-up dominates), at
// depths 2, 8 and 32 (queue capacity / TBB max tokens). Reports per config the
// median and the min-max spread over rounds of dflash throughput / TBB
// throughput, and CPU microseconds per item (getrusage) for both.
// A benchmark, not a test: no thresholds. Extra arguments (Google Benchmark
// flags from scripts/bench.sh) are ignored; DFLASH_BENCH_ROUNDS sets the rounds.
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <oneapi/tbb/parallel_pipeline.h>

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "../compare.hpp"
#include "synthetic_stages.hpp"

namespace {
using namespace bench_pipeline;

struct sample {
  double seconds, cpu_us_per_item;
};

template <class F>
sample measure(int items, F&& run) {
  const double c0 = cpu_seconds();
  const auto t0 = clk::now();
  run();
  const double s = std::chrono::duration<double>(clk::now() - t0).count();
  return {s, (cpu_seconds() - c0) * 1e6 / items};
}

// ---- dflash -----------------------------------------------------------------
using dflash_pipeline =
    dflash::Pipeline<dflash::NullProfiler, source, dflash::queue_link<"a", 8>, dflash::workers<work, 2>,
                     dflash::queue_link<"b", 8>, dflash::in_order<serial>, dflash::queue_link<"c", 8>, sink>;

// The same stages joined by direct links: no queue and no thread of their own;
// the source, the in-order stage and the sink run on the two workers' threads
// (oneTBB's model). Depth = the in-order stage's reorder window.
using dflash_direct =
    dflash::Pipeline<dflash::NullProfiler, source, dflash::direct_link<"a", 8>, dflash::workers<work, 2>,
                     dflash::direct_link<"b", 8>, dflash::in_order<serial>, dflash::direct_link<"c", 8>, sink>;

template <class Pipe>
long long run_dflash(costs c, std::size_t depth) {
  long long sum = 0;
  auto shape = Pipe::default_shape();
  shape.depths = {depth, depth, depth};
  Pipe p(shape, source{c.items}, work{c}, serial{c}, sink{&sum});
  p.run_to_completion();
  return sum;
}

// ---- oneTBB -----------------------------------------------------------------
long long run_tbb(costs c, std::size_t depth) {
  long long sum = 0;
  int next = 0;
  tbb::parallel_pipeline(
      depth,
      tbb::make_filter<void, int>(tbb::filter_mode::serial_in_order,
                                  [&](tbb::flow_control& fc) {
                                    if (next >= c.items) {
                                      fc.stop();
                                      return 0;
                                    }
                                    return next++;
                                  }) &
          tbb::make_filter<int, int>(tbb::filter_mode::parallel,
                                     [c](int x) {
                                       busy(c.work);
                                       return x;
                                     }) &
          tbb::make_filter<int, int>(tbb::filter_mode::serial_in_order,
                                     [c](int x) {
                                       busy(c.serial);
                                       return x;
                                     }) &
          tbb::make_filter<int, void>(tbb::filter_mode::serial_in_order, [&](int x) { sum += x; }));
  return sum;
}

double median(const std::vector<double>& v) { return dflash_bench::summarize(v).median; }
}  // namespace

int main(int argc, char** argv) {
  const int rounds = std::getenv("DFLASH_BENCH_ROUNDS") ? std::atoi(std::getenv("DFLASH_BENCH_ROUNDS"))
                                                        : dflash_bench::rounds_arg(argc, argv, 7);
  if (rounds < 1) {
    std::fprintf(stderr, "pipeline_vs_tbb: rounds must be at least 1 (got %d)\n", rounds);
    return 2;
  }
  struct config {
    const char* what;
    costs c;
    std::size_t depth;
    std::vector<double> ratio, ratio_direct, cpu_d, cpu_direct, cpu_t, tput_t, tput_d, tput_x;
  };
  using us = std::chrono::microseconds;
  std::vector<config> cfgs;
  for (std::size_t d : {2u, 8u, 32u}) cfgs.push_back({"50/20 us work", {us(50), us(20), 2000}, d, {}, {}, {}, {}, {}, {}, {}, {}});
  for (std::size_t d : {2u, 8u, 32u}) cfgs.push_back({"zero-cost stages", {us(0), us(0), 100000}, d, {}, {}, {}, {}, {}, {}, {}, {}});
  for (auto& cf : cfgs) {  // warm-up: threads, allocator, TBB's arena
    run_dflash<dflash_pipeline>(cf.c, cf.depth);
    run_dflash<dflash_direct>(cf.c, cf.depth);
    run_tbb(cf.c, cf.depth);
  }
  for (int r = 0; r < rounds; ++r) {
    for (auto& cf : cfgs) {
      const int items = cf.c.items;
      const long long expected = 1LL * items * (items - 1) / 2;
      long long sd = 0, sx = 0, st = 0;
      sample d{}, t{}, x{};
      for (int k = 0; k < 3; ++k) {  // the order rotates each round
        switch ((k + r) % 3) {
          case 0: d = measure(items, [&] { sd = run_dflash<dflash_pipeline>(cf.c, cf.depth); }); break;
          case 1: t = measure(items, [&] { st = run_tbb(cf.c, cf.depth); }); break;
          default: x = measure(items, [&] { sx = run_dflash<dflash_direct>(cf.c, cf.depth); }); break;
        }
      }
      if (sd != expected || sx != expected || st != expected) {
        std::fprintf(stderr, "pipeline_vs_tbb: wrong result (dflash %lld, direct %lld, tbb %lld, expected %lld)\n", sd,
                     sx, st, expected);
        return 1;
      }
      cf.ratio.push_back(t.seconds / d.seconds);  // = dflash throughput / tbb throughput
      cf.ratio_direct.push_back(t.seconds / x.seconds);
      cf.cpu_direct.push_back(x.cpu_us_per_item);
      cf.cpu_d.push_back(d.cpu_us_per_item);
      cf.cpu_t.push_back(t.cpu_us_per_item);
      cf.tput_t.push_back(items / t.seconds);
      cf.tput_d.push_back(items / d.seconds);
      cf.tput_x.push_back(items / x.seconds);
    }
  }
  std::printf("# pipeline_vs_tbb: %d interleaved rounds, 2 parallel workers + serial in-order stage; 2000 items "
              "(work), 100000 (zero-cost)\n", rounds);
  std::printf("| stages | depth | links | dflash / TBB throughput (median) | spread (min-max) | CPU us/item dflash | CPU us/item TBB | TBB items/s |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  for (const auto& cf : cfgs) {
    for (const bool direct : {false, true}) {
      const auto q = dflash_bench::summarize(direct ? cf.ratio_direct : cf.ratio);
      std::printf("| %s | %zu | %s | %.2f | %.2f-%.2f | %.2f | %.2f | %.0f |\n", cf.what, cf.depth,
                  direct ? "direct_link" : "queue_link", q.median, q.min, q.max, median(direct ? cf.cpu_direct : cf.cpu_d),
                  median(cf.cpu_t), median(cf.tput_t));
    }
  }
  // --benchmark_out=PATH (from scripts/bench.sh): the comparison JSON of compare.hpp, plus CPU per item.
  dflash_bench::comparison cmp{"pipeline", "items/s", {}, {}};
  for (const auto& cf : cfgs)
    for (const bool direct : {false, true}) {
      char shape[128], extra[160];
      std::snprintf(shape, sizeof shape, "%s, depth %zu", cf.what, cf.depth);
      std::snprintf(extra, sizeof extra, "\"subject_cpu_us_per_item\":%.3f,\"anchor_cpu_us_per_item\":%.3f",
                    median(direct ? cf.cpu_direct : cf.cpu_d), median(cf.cpu_t));
      cmp.add_row(shape, direct ? "dflash::Pipeline (direct_link)" : "dflash::Pipeline (queue_link)",
                  "tbb::parallel_pipeline", rounds, median(direct ? cf.tput_x : cf.tput_d), median(cf.tput_t),
                  dflash_bench::summarize(direct ? cf.ratio_direct : cf.ratio), extra);
    }
  cmp.write(argc, argv);
  return 0;
}
