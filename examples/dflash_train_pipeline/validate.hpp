#pragma once
// --validate (profiled build): the advisor's predictions checked against real
// runs. From the run's profile, the advisor's best changes that this program
// has a flag for, and every --what-if with flags, become benchmark variants
// (dflash::bench) next to the configuration as measured: each is run for real
// under NullProfiler (what production runs), rounds interleaved, and the
// table sets the predicted change of tokens/s beside the measured one (each
// round's ratio to the configuration as measured in that round) and the error.
// A slower drafter (drafter.speed=F below 1) is made with --slow-drafter 1/F;
// speedups cannot be made for real and are left out, said so.

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dflash/analysis.hpp>
#include <dflash/bench/variants.hpp>

#include "console.hpp"
#include "options.hpp"
#include "setup.hpp"

namespace dflash_example {

/// The options that make scenario `sc` on this program, or why none do.
inline std::string options_for(const dflash::analysis::scenario& sc, Options& o) {
  for (const auto& c : sc.changes) {
    const auto n = static_cast<std::int32_t>(c.value);
    using kind = dflash::analysis::change::kind;
    if (c.what == kind::workers && c.target == "target_forward") o.target_workers = n;
    else if (c.what == kind::depth && c.target == "batch_queue") o.batch_queue_depth = n;
    else if (c.what == kind::depth && (c.target == "hs_device" || c.target == "hs_rows")) o.post_link_depth = n;
    else if (c.what == kind::depth && c.target == "hs_queue") o.hs_queue_depth = n;
    else if (c.what == kind::speed && c.target == "drafter" && c.value < 1) o.slow_drafter = o.slow_drafter / c.value;
    else if (c.what == kind::speed) return "a speedup (code or hardware): no flag makes it";
    else return "no flag sets " + c.target + (c.what == kind::workers ? ".workers" : ".depth");
  }
  return {};
}

/// Runs the scenarios for real and compares; `run` is one training run of
/// options `o` under NullProfiler, returning its tokens.
template <class Run>
std::string validate_predictions(const dflash::analysis::advice& a, const dflash::analysis::advice_options& ao,
                                 const Options& base, std::size_t rounds, Run&& run) {
  namespace da = dflash::analysis;
  namespace db = dflash::bench;
  if (!a.model.ok) return "validate: no predictions to check (" + a.model.why_not + ")\n";
  std::vector<da::prediction> picked;
  std::string skipped;
  auto consider = [&](const da::prediction& p) {
    for (const auto& q : picked)
      if (q.what.text() == p.what.text()) return;
    Options o = base;
    if (const std::string why = options_for(p.what, o); !why.empty()) {
      skipped += "    " + p.what.text() + ": " + why + "\n";
      return;
    }
    picked.push_back(p);
  };
  for (std::size_t i = 0; i < a.ranked.size() && i < ao.top; ++i) consider(a.ranked[i]);
  if (const da::prediction* best = da::best_with_flag(a, ao)) consider(*best);  // the report's "best change a flag makes"
  for (const auto& p : a.requested) consider(p);
  if (picked.empty()) return "validate: no prediction above can be made with this program's flags:\n" + skipped;

  std::vector<Options> configs{base};
  for (const auto& p : picked) {
    Options o = base;
    (void)options_for(p.what, o);
    configs.push_back(o);
  }
  db::grid g;
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < configs.size(); ++i) ids.push_back(static_cast<std::int64_t>(i));
  g.add("scenario", ids);
  db::options bo;
  bo.rounds = rounds;
  bo.unit = "tokens";
  const db::result r = db::run(db::policies<dflash::NullProfiler>{}, g,
                               [&](const dflash::NullProfiler&, const db::config& c) {
                                 return run(configs[static_cast<std::size_t>(c["scenario"])]);
                               },
                               bo);
  char line[512];
  std::string out = "validate: the predictions above, run for real (NullProfiler, " + std::to_string(rounds) +
                    " rounds interleaved, each round's tokens/s over the configuration as measured in that round)\n";
  std::snprintf(line, sizeof line, "  %-40s %10s %10s %22s %8s  %s\n", "change", "predicted", "measured", "[p25 .. p75]",
                "error", "verdict");
  out += line;
  for (std::size_t i = 0; i < picked.size(); ++i) {
    const db::comparison c = r.compare(i + 1, 0);
    const double measured = c.ratio.median - 1, predicted = picked[i].gain;
    char range[64];
    std::snprintf(range, sizeof range, "[%+.1f%% .. %+.1f%%]", (c.ratio.p25 - 1) * 100, (c.ratio.p75 - 1) * 100);
    std::snprintf(line, sizeof line, "  %-40s %+9.1f%% %+9.1f%% %22s %+7.1f%%  %s (%zu faster, %zu slower)\n",
                  picked[i].what.text().c_str(), predicted * 100, measured * 100, range, (predicted - measured) * 100,
                  db::to_string(c.verdict).c_str(), c.votes.faster, c.votes.slower);
    out += line;
  }
  std::snprintf(line, sizeof line, "  as measured: %.0f tokens/s (median of the rounds); error = predicted - measured\n",
                r.variants[0].rate.median);
  out += line;
  if (!skipped.empty()) out += "  not run:\n" + skipped;
  return out;
}

}  // namespace dflash_example
