// The instrumented PackStage with AccumulatingProfiler: the price of real timing.
#include "hot_loop.hpp"

namespace {
dflash::AccumulatingProfiler<zero_cost::keys> profiler;
}

extern "C" [[gnu::noinline]] std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in) {
  return zero_cost::PackStage<decltype(profiler)>{profiler}(in);
}
