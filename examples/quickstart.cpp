#include <dflash/pipeline.hpp>  // stages, links, make_pipeline (the host core: no CCCL)
#include <dflash/profile.hpp>   // NullProfiler, AccumulatingProfiler
#include <cstdio>
#include <optional>

int main() {
  int next = 0;
  long long sum = 0, last = -1;
  bool ordered = true;
  auto numbers = dflash::stage<"numbers">([&]() -> std::optional<int> {
    return next < 20000 ? std::optional(next++) : std::nullopt;
  });
  auto square = dflash::stage<"square">([](int x) { return 1LL * x * x; });
  auto add = dflash::stage<"sum">([&](long long v) {  // in_order: squares arrive in source order
    ordered = ordered && v > last;
    last = v;
    sum += v;
  });
  auto build = [&](const auto& prof) {
    return dflash::make_pipeline(prof, numbers, dflash::queue_link<"in", 64>{}, dflash::parallel<2>(square),
                                 dflash::queue_link<"out", 64>{}, dflash::in_order(add));
  };

  build(dflash::NullProfiler{}).run_to_completion();  // plain build: nothing recorded, nothing paid
  std::printf("sum %lld, in order: %s\n", sum, ordered ? "yes" : "no");

  next = 0, sum = 0, last = -1;
  dflash::AccumulatingProfiler<dflash::pipeline_keys<decltype(build)>> prof;
  build(prof).run_to_completion();                    // profiled build: per-stage wait / work, queue waits
  std::printf("sum %lld, in order: %s\n%s", sum, ordered ? "yes" : "no", prof.summary().c_str());
}
