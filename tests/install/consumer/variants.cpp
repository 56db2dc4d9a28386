// dflash_add_variants: one workload under two profiler policies and two
// sizes, measured side by side (consumer_variants) and one binary per policy
// (consumer_variants_null, consumer_variants_accumulating).
#include <dflash/bench/main.hpp>
#include <dflash/profile.hpp>

using namespace dflash::literals;
using keys = dflash::key_set<"step">;

int main(int argc, char** argv) {
  const auto work = [](const auto& prof, const dflash::bench::config& c) {
    volatile long sum = 0;
    for (long i = 0; i < c["n"]; ++i) {
      auto t = prof.scope("step"_key);
      sum = sum + i;
    }
    return c["n"];
  };
  dflash::bench::options o;
  o.rounds = 3;
  o.unit = "steps";
  return dflash::bench::run_main(argc, argv,
                                 dflash::bench::policies<dflash::NullProfiler, dflash::AccumulatingProfiler<keys>>{},
                                 dflash::bench::grid().add("n", {1000, 2000}), work, o);
}
