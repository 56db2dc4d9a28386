// Benchmark variants: what does profiling cost this pipeline, and is a queue
// depth of 8 or 64 faster? Two policies x two depths, every variant in one
// process, rounds interleaved; the table says which differences are real.
#include <dflash/bench/variants.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <cstdio>
#include <optional>

int main() {
  int next = 0;
  long long sum = 0;
  auto numbers = dflash::stage<"numbers">([&]() -> std::optional<int> {
    return next < 200000 ? std::optional(next++) : std::nullopt;
  });
  auto square = dflash::stage<"square">([](int x) { return 1LL * x * x; });
  auto add = dflash::stage<"sum">([&](long long v) { sum += v; });
  auto build = [&](const auto& prof) {
    return dflash::make_pipeline(prof, numbers, dflash::queue_link<"in", 8>{}, dflash::parallel<2>(square),
                                 dflash::queue_link<"out", 8>{}, add);
  };
  auto workload = [&](const auto& prof, const dflash::bench::config& c) {  // one run: the items it moved
    using pipeline = decltype(build(prof));
    auto shape = pipeline::default_shape();
    shape.depths = {static_cast<std::size_t>(c["depth"]), static_cast<std::size_t>(c["depth"])};
    next = 0, sum = 0;
    pipeline(prof, shape, numbers, square, add).run_to_completion();
    return next;
  };
  using profiled = dflash::AccumulatingProfiler<dflash::pipeline_keys<decltype(build)>>;
  dflash::bench::options o;
  o.unit = "items";
  const auto r = dflash::bench::run(dflash::bench::policies<dflash::NullProfiler, profiled>{},
                                    dflash::bench::grid().add("depth", {8, 64}), workload, o);
  std::printf("%s", r.table().c_str());
}
