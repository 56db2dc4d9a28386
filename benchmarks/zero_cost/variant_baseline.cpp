// Baseline: the PackStage body written by hand with no instrumentation at all.
#include "hot_loop.hpp"

extern "C" [[gnu::noinline]] std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in) {
  return zero_cost::PackStageUninstrumented{}(in);
}
