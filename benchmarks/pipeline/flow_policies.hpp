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
static_assert(std::is_same_v<keys, dflash::pipeline_keys<direct<dflash::NullProfiler>>>);
using flow_on = dflash::AccumulatingProfiler<keys>;
struct flow_off : dflash::AccumulatingProfiler<keys> {
  static constexpr bool flow = false;
};
static_assert(dflash::FlowPolicy<flow_on> && !dflash::FlowPolicy<flow_off>);

}  // namespace bench_pipeline
