// The instrumented PackStage with NullProfiler: must equal the baseline.
#include "hot_loop.hpp"

extern "C" [[gnu::noinline]] std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in) {
  return zero_cost::PackStage<dflash::NullProfiler>{}(in);
}
