// dflash_train_pipeline_variants: the training pipeline as benchmark variants
// (dflash/bench): three profiler policies x hs_queue depths x target workers,
// every variant in one process, rounds interleaved. Prints the runner's table,
// what profiling costs (each profiled policy's tokens/s over NullProfiler's in
// the same rounds and configuration) and the fastest configuration with its
// margin over the next. Flags: dflash::bench::run_main's (--rounds, --seed,
// --json, --plot, ...).
#include <dflash/bench/main.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/trace_profiler.hpp>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "train.hpp"

namespace ex = dflash_example;
namespace db = dflash::bench;

namespace {

std::string percent(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f %%", x * 100);
  return b;
}

// "profiling costs X % of tokens/s": 1 - (policy's rate / NullProfiler's), per round.
std::string profiling_cost(const db::result& r, const std::string& policy, const std::string& config) {
  const db::comparison c = r.compare(policy + " " + config, "NullProfiler " + config);
  const db::spread& s = c.ratio;
  return policy + " costs " + percent(1 - s.median) + " of tokens/s [" + percent(1 - s.p75) + " .. " +
         percent(1 - s.p25) + " over the middle half of the rounds] at " + config +
         (c.verdict == db::verdict::within_noise ? " (within noise)" : "") + "\n";
}

std::string summary(const db::result& r) {
  std::string out;
  bool all_there = true;
  for (const char* p : {"NullProfiler", "AccumulatingProfiler", "accumulating+trace"})
    all_there = all_there && std::any_of(r.variants.begin(), r.variants.end(),
                                          [&](const db::variant_result& v) { return v.policy == p; });
  if (!all_there) return "(one policy only: no comparison of policies)\n";
  // What profiling costs, at every configuration.
  for (const auto& v : r.variants)
    if (v.policy == "NullProfiler")
      for (const char* p : {"AccumulatingProfiler", "accumulating+trace"}) out += profiling_cost(r, p, v.settings.label());
  // The fastest configuration (NullProfiler: what production runs) and its margin over the next.
  std::vector<std::size_t> plain;
  for (std::size_t i = 0; i < r.variants.size(); ++i)
    if (r.variants[i].policy == "NullProfiler") plain.push_back(i);
  std::sort(plain.begin(), plain.end(),
            [&](std::size_t a, std::size_t b) { return r.variants[a].rate.median > r.variants[b].rate.median; });
  if (plain.size() >= 2) {
    const db::comparison m = r.compare(plain[0], plain[1]);
    out += "fastest configuration: " + r.variants[plain[0]].settings.label() + ", " +
           percent(m.ratio.median - 1) + " more tokens/s than " + r.variants[plain[1]].settings.label() + " [" +
           percent(m.ratio.p25 - 1) + " .. " + percent(m.ratio.p75 - 1) + "] (" + db::to_string(m.verdict) + ", " +
           std::to_string(m.votes.faster) + " of " + std::to_string(m.votes.rounds) + " rounds)\n";
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using acc = dflash::AccumulatingProfiler<ex::train_keys>;
  using both = db::named<"accumulating+trace", dflash::Composite<acc, dflash::TraceProfiler<ex::train_keys>>>;
  db::grid g;
  g.add("hs_queue_depth", {8, 60}).add("target_workers", {1, 2});

  ex::Options base;
  base.steps = 60;
  base.seq_len = 256;
  base.quiet = true;
  base.profile_interval = 0;
  base.progress_interval = 0;
  std::map<std::string, std::unique_ptr<ex::Setup>> setups;  // models and data per configuration, made once
  auto setup_of = [&](const db::config& c) -> const ex::Setup& {
    auto& s = setups[c.label()];
    if (!s) {
      ex::Options o = base;
      o.hs_queue_depth = static_cast<std::int32_t>(c["hs_queue_depth"]);
      o.target_workers = static_cast<std::int32_t>(c["target_workers"]);
      s = std::make_unique<ex::Setup>(o);
    }
    return *s;
  };
  ex::Console console(stdout, false, /*quiet=*/true);
  const auto work = [&](const auto& prof, const db::config& c) {
    dflash::NullProfiler no_tables;  // periodic tables off: the workload is the run alone
    using P = std::decay_t<decltype(prof)>;
    return ex::run_training<P, dflash::host_stream_backend>(setup_of(c), prof, no_tables, console, nullptr).log.tokens;
  };
  db::options o;
  o.unit = "tokens";
  return db::run_main(argc, argv, db::policies<dflash::NullProfiler, acc, both>{}, g, work, o, summary);
}
