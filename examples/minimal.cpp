#include <dflash/dflash.hpp>

#include <cstdio>
#include <vector>

using namespace dflash::literals;

template <dflash::ProfilerPolicy P>  // a stage: instrumented once, profiled on demand
struct Normalize {
  using keys = dflash::key_set<"normalize">;  // a misspelt key fails every build, NullProfiler's too
  [[no_unique_address]] dflash::profiler_ref<P, keys> prof;

  void operator()(std::vector<float>& x) const {
    auto t = prof->scope("normalize"_key);
    float sum = 0;
    for (float v : x) sum += v;
    for (float& v : x) v /= sum;
  }
};

int main() {
  std::vector<float> x(1 << 16, 1.0f);
  Normalize<dflash::NullProfiler>{}(x);  // compiles to the bare loops: no clock, no branch

  dflash::AccumulatingProfiler<dflash::key_set<"normalize">> prof;
  Normalize<decltype(prof)> measured{prof};
  for (int i = 0; i < 100; ++i) measured(x);
  std::printf("%s", prof.summary().c_str());
}
