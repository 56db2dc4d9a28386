// The instrumented PackStage as a dflash::bench workload gets it: a
// NullProfiler made by the runner (bench::instance) and handed to the stage.
// Must equal the baseline: benchmark variants cost nothing under NullProfiler.
#include <dflash/bench/policies.hpp>

#include "hot_loop.hpp"

extern "C" [[gnu::noinline]] std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in) {
  const dflash::bench::instance<dflash::NullProfiler> prof;
  return zero_cost::PackStage<dflash::NullProfiler>{prof.get()}(in);
}
