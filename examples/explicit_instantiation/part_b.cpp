#include "uses.hpp"

#include <cstdio>

long long sum_of_squares_profiled(int count) {
  long long sum = 0;
  sum_profiler prof;
  sum_pipeline<sum_profiler> p(prof, numbers<sum_profiler>{count}, square<sum_profiler>{}, total<sum_profiler>{&sum});
  p.run_to_completion();
  std::printf("%s", prof.summary().c_str());
  return sum;
}
