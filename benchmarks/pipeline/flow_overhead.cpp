// What following every item costs: the same profiled pipeline with flow
// tracking on (AccumulatingProfiler: items carry a flow_stamp, stages record
// "<stage>.age", the sink "<sink>.e2e") and off (the same profiler with
// `flow = false`), in one process, rounds interleaved (the order alternates
// each round). Stages as in pipeline_vs_tbb:
//   source -> 2 parallel workers x W us busy work -> serial in-order S us -> sink
// joined by queue links and by direct links, for 2000 items at W/S = 50/20 us
// and 100000 items at 0/0 (the per-item hand-off cost, where a stamp shows most).
// Reports process CPU microseconds per item (getrusage) for both and the
// per-round ratio on/off: median and min-max spread.
// A benchmark, not a test: no thresholds. DFLASH_BENCH_ROUNDS sets the rounds.
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "../compare.hpp"
#include "flow_policies.hpp"
#include "synthetic_stages.hpp"

namespace {
using namespace bench_pipeline;

// CPU us per item of one run; the result is checked.
template <template <class> class Pipe, class P>
double run(costs c) {
  P prof;
  long long sum = 0;
  const double c0 = cpu_seconds();
  {
    Pipe<P> p(prof, source{c.items}, work{c}, serial{c}, sink{&sum});
    p.run_to_completion();
  }
  const double cpu = (cpu_seconds() - c0) * 1e6 / c.items;
  if (sum != 1LL * c.items * (c.items - 1) / 2) {
    std::fprintf(stderr, "flow_overhead: wrong result\n");
    std::exit(1);
  }
  const auto s = prof.snapshot();
  if ((s.find("sink.e2e")->count != 0) != dflash::FlowPolicy<P>) {
    std::fprintf(stderr, "flow_overhead: sink.e2e recorded %llu items with flow %s\n",
                 static_cast<unsigned long long>(s.find("sink.e2e")->count), dflash::FlowPolicy<P> ? "on" : "off");
    std::exit(1);
  }
  return cpu;
}
}  // namespace

int main(int argc, char** argv) {
  const int rounds = std::getenv("DFLASH_BENCH_ROUNDS") ? std::atoi(std::getenv("DFLASH_BENCH_ROUNDS"))
                                                        : dflash_bench::rounds_arg(argc, argv, 9);
  if (rounds < 1) {
    std::fprintf(stderr, "flow_overhead: rounds must be at least 1 (got %d)\n", rounds);
    return 2;
  }
  using us = std::chrono::microseconds;
  struct config {
    const char* what;
    costs c;
    bool direct;
    std::vector<double> on, off, ratio;
  };
  std::vector<config> cfgs{{"50/20 us work, 2000 items", {us(50), us(20), 2000}, false, {}, {}, {}},
                           {"50/20 us work, 2000 items", {us(50), us(20), 2000}, true, {}, {}, {}},
                           {"0/0 us, 100000 items", {us(0), us(0), 100000}, false, {}, {}, {}},
                           {"0/0 us, 100000 items", {us(0), us(0), 100000}, true, {}, {}, {}}};
  const auto one = [](const config& cf, bool on) {
    if (cf.direct) return on ? run<direct, flow_on>(cf.c) : run<direct, flow_off>(cf.c);
    return on ? run<queued, flow_on>(cf.c) : run<queued, flow_off>(cf.c);
  };
  for (auto& cf : cfgs) {  // warm-up
    one(cf, true);
    one(cf, false);
  }
  for (int r = 0; r < rounds; ++r)
    for (auto& cf : cfgs) {
      double on, off;
      if (r % 2) {
        on = one(cf, true);
        off = one(cf, false);
      } else {
        off = one(cf, false);
        on = one(cf, true);
      }
      cf.on.push_back(on);
      cf.off.push_back(off);
      cf.ratio.push_back(on / off);
    }
  std::printf("# flow_overhead: %d interleaved rounds; process CPU us per item, AccumulatingProfiler with flow "
              "tracking on vs off\n",
              rounds);
  std::printf("| stages | links | CPU us/item flow on | CPU us/item flow off | on / off (median) | spread (min-max) |\n");
  std::printf("|---|---|---|---|---|---|\n");
  // --benchmark_out=PATH (from scripts/bench.sh): the comparison JSON of compare.hpp, for the report.
  dflash_bench::comparison cmp{"flow_overhead", "CPU us/item", {}, {}};
  for (const auto& cf : cfgs) {
    const auto q = dflash_bench::summarize(cf.ratio);
    const double on = dflash_bench::summarize(cf.on).median, off = dflash_bench::summarize(cf.off).median;
    const char* links = cf.direct ? "direct_link" : "queue_link";
    std::printf("| %s | %s | %.2f | %.2f | %.3f | %.3f-%.3f |\n", cf.what, links, on, off, q.median, q.min, q.max);
    char extra[128];
    std::snprintf(extra, sizeof extra, "\"subject_cpu_us_per_item\":%.4f,\"anchor_cpu_us_per_item\":%.4f", on, off);
    cmp.add_row(std::string(cf.what) + ", " + links, "flow tracking on", "flow tracking off", rounds, on, off, q, extra);
  }
  cmp.write(argc, argv);
  return 0;
}
