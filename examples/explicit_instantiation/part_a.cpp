#include "uses.hpp"

long long sum_of_squares(int count) {
  long long sum = 0;
  sum_pipeline<dflash::NullProfiler> p(numbers<dflash::NullProfiler>{count}, square<dflash::NullProfiler>{},
                                       total<dflash::NullProfiler>{&sum});
  p.run_to_completion();
  return sum;
}
