// The instrumented PackStage with Composite<> (no members): must equal the baseline.
#include <dflash/profile/composite.hpp>

#include "hot_loop.hpp"

static_assert(sizeof(zero_cost::PackStage<dflash::Composite<>>) == sizeof(zero_cost::PackStageUninstrumented));

extern "C" [[gnu::noinline]] std::uint64_t dflash_hot_loop(const zero_cost::pack_input& in) {
  return zero_cost::PackStage<dflash::Composite<>>{}(in);
}
