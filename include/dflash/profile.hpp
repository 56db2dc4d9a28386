#pragma once
// All profiler policies and their support types.
#include "dflash/profile/accumulating_profiler.hpp"
#include "dflash/profile/clock.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"
