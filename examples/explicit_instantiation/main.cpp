// Four TUs use one pipeline type (part_a/b/c.cpp and this one); built twice, with the recipe of
// sum_pipeline_extern.hpp (the engine compiled once, in sum_pipeline.cpp) and without it.
#include "uses.hpp"

#include <cstdio>

int main() {
  const int n = 1000;
  const long long expected = 1LL * (n - 1) * n * (2 * n - 1) / 6;
  long long sum = 0;
  sum_pipeline<dflash::NullProfiler> p(numbers<dflash::NullProfiler>{n}, square<dflash::NullProfiler>{},
                                       total<dflash::NullProfiler>{&sum});
  p.run_to_completion();
  const long long a = sum_of_squares(n), b = sum_of_squares_profiled(n), c = sum_of_squares_stopped(n);
  const bool ok = sum == expected && a == expected && b == expected && c >= 0 && c <= expected;
  std::printf("sums %lld %lld %lld (expected %lld), stopped %lld: %s\n", sum, a, b, expected, c, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
