#pragma once
// Umbrella header: everything host-side. CUDA-only pieces live in .cuh headers
// and are included explicitly from .cu translation units.
#include "dflash/config.hpp"
#include "dflash/profile.hpp"
#include "dflash/queue.hpp"
#include "dflash/pipeline.hpp"
