#pragma once
// Which stage limits a pipeline and what a change would buy, from a profile:
// bottleneck.hpp (utilisation, starved / blocked, the limiting stage),
// tandem_simulator.hpp (the finite-buffer queueing model), what_if.hpp
// (calibration and predictions), advice.hpp (the report section).
#include "dflash/analysis/advice.hpp"
#include "dflash/analysis/bottleneck.hpp"
#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/analysis/service_distribution.hpp"
#include "dflash/analysis/tandem_simulator.hpp"
#include "dflash/analysis/what_if.hpp"
