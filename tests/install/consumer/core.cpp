// A host-core consumer: dflash::core alone, no CCCL and no CUDA toolkit
// needed. A 3-stage pipeline, profiled, must deliver every item in order.
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <cstdio>
#include <optional>

#include "version_check.hpp"

using namespace dflash::literals;

int main() {
  int next = 0;
  long long sum = 0, last = -1;
  bool ordered = true;
  auto numbers = dflash::stage<"numbers">([&]() -> std::optional<int> {
    return next < 1000 ? std::optional(next++) : std::nullopt;
  });
  auto square = dflash::stage<"square">([](int x) { return 1LL * x * x; });
  auto add = dflash::stage<"sum">([&](long long v) {
    ordered = ordered && v > last;
    last = v;
    sum += v;
  });
  auto build = [&](const auto& prof) {
    return dflash::make_pipeline(prof, numbers, dflash::queue_link<"in", 8>{}, dflash::parallel<2>(square),
                                 dflash::queue_link<"out", 8>{}, dflash::in_order(add));
  };
  dflash::AccumulatingProfiler<dflash::pipeline_keys<decltype(build)>> prof;
  build(prof).run_to_completion();
  const auto n = prof.count("sum.work"_key);
  std::printf("core: sum=%lld ordered=%d sum.work=%llu\n", sum, ordered ? 1 : 0, static_cast<unsigned long long>(n));
  return sum == 332833500LL && ordered && n == 1000 ? 0 : 1;
}
