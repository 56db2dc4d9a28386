#pragma once
// For programs that live in Google Benchmark: one benchmark per variant of
// bench/variants.hpp, "<prefix>/<policy>/<setting>=<value>...", each
// iteration one run of the workload with a fresh profiler, and a "<unit>/s"
// counter. Include it where <benchmark/benchmark.h> is available; the rest of
// dflash::bench never needs it. (Google Benchmark times back to back, not
// interleaved: for ratios between variants, run() is the tool.)

#include <benchmark/benchmark.h>

#include <string>

#include "dflash/bench/grid.hpp"
#include "dflash/bench/policies.hpp"

namespace dflash::bench {

template <class... Ps, class Workload>
void register_variants(const std::string& prefix, policies<Ps...>, const grid& g, Workload work,
                       const std::string& unit = "items") {
  for (const config& c : g.configs()) {
    auto one = [&]<class Entry>() {
      using P = policy_of<Entry>;
      std::string name = prefix + "/" + label_of<Entry>();
      for (const auto& [k, v] : c.values()) name += "/" + k + "=" + std::to_string(v);
      benchmark::RegisterBenchmark(name.c_str(), [work, c, unit](benchmark::State& st) {
        double units = 0;
        for (auto _ : st) {
          st.PauseTiming();
          const instance<P> prof;
          st.ResumeTiming();
          units += static_cast<double>(work(prof.get(), c));
        }
        st.counters[unit + "/s"] = benchmark::Counter(units, benchmark::Counter::kIsRate);
      });
    };
    (one.template operator()<Ps>(), ...);
  }
}

}  // namespace dflash::bench
