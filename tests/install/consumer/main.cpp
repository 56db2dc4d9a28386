#include <dflash/dflash.hpp>
#include <thrust/reduce.h>
#include <thrust/execution_policy.h>

#include <cstdio>

#include "version_check.hpp"

using namespace dflash::literals;

int main() {
  dflash::AccumulatingProfiler<dflash::key_set<"sum">> prof;
  int v[4] = {1, 2, 3, 4};
  const int s = dflash::timed(prof, "sum"_key, [&] { return thrust::reduce(thrust::host, v, v + 4); });
  std::printf("sum=%d count=%llu\n", s, static_cast<unsigned long long>(prof.count("sum"_key)));
  return s == 10 && prof.count("sum"_key) == 1 ? 0 : 1;
}
