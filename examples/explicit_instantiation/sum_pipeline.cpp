// The one TU that instantiates the pipelines sum_pipeline_extern.hpp declares.
#include "sum_pipeline_extern.hpp"

template class dflash::Pipeline<dflash::NullProfiler, numbers<dflash::NullProfiler>, dflash::queue_link<"in", 64>,
                                dflash::workers<square<dflash::NullProfiler>, 2>, dflash::queue_link<"out", 64>,
                                dflash::in_order<total<dflash::NullProfiler>>>;
template class dflash::Pipeline<sum_profiler, numbers<sum_profiler>, dflash::queue_link<"in", 64>,
                                dflash::workers<square<sum_profiler>, 2>, dflash::queue_link<"out", 64>,
                                dflash::in_order<total<sum_profiler>>>;
