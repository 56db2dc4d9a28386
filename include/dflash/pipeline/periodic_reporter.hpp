#pragma once
// periodic_reporter is a profile facility (it reports any profiler, with or
// without a pipeline): it lives in <dflash/profile/periodic_reporter.hpp>.
// This header keeps the old include path working.
#include "dflash/profile/periodic_reporter.hpp"
