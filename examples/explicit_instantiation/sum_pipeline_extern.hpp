#pragma once
// The recipe: declare the instantiations here, define them in one TU (sum_pipeline.cpp). A TU
// that includes this header compiles the pipeline's class but not its engine (run, join and
// the worker agents behind them): the linker takes those from sum_pipeline.cpp.
#include "sum_pipeline.hpp"

extern template class dflash::Pipeline<dflash::NullProfiler, numbers<dflash::NullProfiler>, dflash::queue_link<"in", 64>,
                                       dflash::workers<square<dflash::NullProfiler>, 2>, dflash::queue_link<"out", 64>,
                                       dflash::in_order<total<dflash::NullProfiler>>>;
extern template class dflash::Pipeline<sum_profiler, numbers<sum_profiler>, dflash::queue_link<"in", 64>,
                                       dflash::workers<square<sum_profiler>, 2>, dflash::queue_link<"out", 64>,
                                       dflash::in_order<total<sum_profiler>>>;
