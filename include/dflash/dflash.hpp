#pragma once
// Umbrella header: everything host-side. CUDA-only pieces live in .cuh headers
// and are included explicitly from .cu translation units.
#include "dflash/config.hpp"
#include "dflash/version.hpp"
#include "dflash/profile.hpp"
#include "dflash/profile/composite.hpp"       // needs only Hana
#include "dflash/profile/trace_profiler.hpp"  // nvtx_profiler / cuda_event_profiler: include explicitly (CUDA headers)
#include "dflash/queue.hpp"
#include "dflash/device.hpp"
#include "dflash/pipeline.hpp"
#include "dflash/ops.hpp"
#include "dflash/analysis.hpp"
