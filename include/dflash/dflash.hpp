#pragma once
// Umbrella header: everything host-side, the ops included, so it needs CCCL
// (target dflash::dflash); the host core alone is <dflash/pipeline.hpp> +
// <dflash/profile.hpp> (dflash::core). CUDA-only pieces live in .cuh headers
// and are included explicitly from .cu translation units.
#include "dflash/detail/require_cccl.hpp"  // the ops and the ring control need CCCL
#include "dflash/config.hpp"
#include "dflash/version.hpp"
#include "dflash/profile.hpp"
#include "dflash/profile/composite.hpp"       // needs only Hana
#include "dflash/profile/trace_profiler.hpp"  // nvtx_profiler / cuda_event_profiler: include explicitly (CUDA headers)
#include "dflash/queue.hpp"
#include "dflash/device.hpp"
#include "dflash/pipeline.hpp"
#include "dflash/pipeline/links/device_queue.hpp"  // needs CCCL (the ring control), so not in pipeline.hpp
#include "dflash/pipeline/graphed.hpp"             // opt-in pieces, kept out of pipeline.hpp's compile time
#include "dflash/pipeline/handoff.hpp"
#include "dflash/ops.hpp"
#include "dflash/analysis.hpp"
