#pragma once
// The example's advice: which stage limits tokens/s and what a change would
// buy (dflash/analysis.hpp), with the flag of this program that makes each
// change. Printed after the final profile, in periodic tables with --advice,
// and for the configurations --what-if names.

#include <cstdint>
#include <optional>
#include <string>

#if __has_include(<sys/resource.h>)
#include <sys/resource.h>
#endif

#include <dflash/analysis.hpp>

#include "options.hpp"

namespace dflash_example {

/// CPU time this process has used so far (user + system), in ns; 0 where unknown.
inline double process_cpu_ns() noexcept {
#if __has_include(<sys/resource.h>)
  rusage u{};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  auto ns = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_usec) * 1e3; };
  return ns(u.ru_utime) + ns(u.ru_stime);
#else
  return 0;
#endif
}

/// How a change is spelt to whoever runs the pipeline: a flag of this program, or an argument
/// of the Python module's HiddenStates.
enum class knob_names { cli, python };

/// The advisor's options for this pipeline, each change named as `names` spells it.
inline dflash::analysis::advice_options advice_options_for(const Options& o, const dflash::analysis::pipeline_layout& lay,
                                                           knob_names names = knob_names::cli) {
  dflash::analysis::advice_options a;
  a.knobs = {{"target_forward.workers", "--target-workers"},
             {"batch_queue.depth", "--batch-queue-depth"},
             {"hs_device.depth", "--post-link-depth"},
             {"hs_queue.depth", "--hs-queue-depth"}};
  if (names == knob_names::python)  // --target-workers -> target_workers=
    for (auto& [knob, flag] : a.knobs) {
      flag = flag.substr(2) + "=";
      for (char& ch : flag)
        if (ch == '-') ch = '_';
    }
  for (const auto& w : o.what_if) a.requested.push_back(dflash::analysis::parse_scenario(w, lay));
  a.format = o.profile_format == output_format::json ? dflash::report_format::json : dflash::report_format::table;
  a.unit = "steps/s";
  return a;
}

/// Every --what-if names a stage or link of this pipeline, with a valid value: empty, or why not.
inline std::string bad_what_if(const Options& o, const dflash::analysis::pipeline_layout& lay) {
  try {
    (void)advice_options_for(o, lay);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return {};
}

/// The advice for one profile window, and the options it was made with.
/// tokens_per_step > 0 speaks of tokens/s; cpu_ns: the process's CPU time over
/// the window (0 = unknown).
struct advised {
  dflash::analysis::advice advice;
  dflash::analysis::advice_options options;
};
inline advised advise_on(const dflash::profile_snapshot& snap, const dflash::analysis::pipeline_layout& lay,
                         const Options& o, double cpu_ns, double tokens_per_step, knob_names names = knob_names::cli) {
  advised r{{}, advice_options_for(o, lay, names)};
  auto& a = r.options;
  a.model.process_cpu_ns = cpu_ns;
  a.model.seed = o.seed;
  if (tokens_per_step > 0) {
    a.unit = "tokens/s";
    a.units_per_item = tokens_per_step;
  }
  r.advice = dflash::analysis::advise(snap, lay, a);
  return r;
}

/// The advice section for one profile window (see advise_on).
inline std::string advice_text(const advised& a) {
  std::string out = dflash::analysis::format_advice(a.advice, a.options);
  if (a.options.format == dflash::report_format::json) out = "{\"advice\":" + out + "}\n";
  return out;
}
inline std::string advice_text(const dflash::profile_snapshot& snap, const dflash::analysis::pipeline_layout& lay,
                               const Options& o, double cpu_ns, double tokens_per_step) {
  return advice_text(advise_on(snap, lay, o, cpu_ns, tokens_per_step));
}

}  // namespace dflash_example
