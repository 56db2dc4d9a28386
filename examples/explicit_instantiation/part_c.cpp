#include "uses.hpp"

// Stops the pipeline at once: the run ends cancelled, with some or no items summed.
long long sum_of_squares_stopped(int count) {
  long long sum = 0;
  sum_pipeline<dflash::NullProfiler> p(numbers<dflash::NullProfiler>{count}, square<dflash::NullProfiler>{},
                                       total<dflash::NullProfiler>{&sum});
  p.run();
  p.stop();
  p.join();
  return p.cancelled() ? sum : -1;
}
