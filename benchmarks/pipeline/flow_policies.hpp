#pragma once
// The two profiler policies that price following items (flow_overhead,
// pipeline_vs_tbb): AccumulatingProfiler over the synthetic pipelines' keys,
// which stamps every item (flow tracking on), and the same with `flow = false`.

#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include <type_traits>

#include "synthetic_stages.hpp"

namespace bench_pipeline {

using keys = dflash::pipeline_keys<queued<dflash::NullProfiler>>;
// One policy for both shapes: the direct pipeline records a subset of the queued one's keys
// (a direct link has no pop_wait).
static_assert([] {
  for (auto k : dflash::pipeline_keys<direct<dflash::NullProfiler>>::names)
    if (!keys::contains(k)) return false;
  return true;
}());
using flow_on = dflash::AccumulatingProfiler<keys>;
struct flow_off : dflash::AccumulatingProfiler<keys> {
  static constexpr bool flow = false;
};
static_assert(dflash::FlowPolicy<flow_on> && !dflash::FlowPolicy<flow_off>);

}  // namespace bench_pipeline
