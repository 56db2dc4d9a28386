#pragma once
// The advice section of a report: the bottleneck (bottleneck.hpp), then the
// changes with the largest predicted gain (what_if.hpp), each with the command
// line flag that makes it where the program names one, then any predictions
// the caller asked for. Table or JSON. Computed only when called.
//
//   dflash::analysis::advice_options o;
//   o.knobs = {{"target_forward.workers", "--target-workers"}, {"hs_queue.depth", "--hs-queue-depth"}};
//   o.unit = "tokens/s";  o.units_per_item = tokens / items;
//   std::puts(format_advice(advise(prof.snapshot(), pipeline.layout(), o), o).c_str());

#include <cstddef>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "dflash/analysis/bottleneck.hpp"
#include "dflash/analysis/what_if.hpp"
#include "dflash/profile/report.hpp"

namespace dflash::analysis {

struct advice_options {
  model_options model;
  /// "<stage>.workers" or "<link>.depth" -> the flag that sets it ("--target-workers"), or a
  /// keyword argument ending in '=' ("target_workers="), which takes the value without a space.
  std::vector<std::pair<std::string, std::string>> knobs;
  std::vector<scenario> requested;  ///< predicted as well, listed after the best ones
  std::string unit = "items/s";
  double units_per_item = 1;        ///< e.g. tokens per item, to print tokens/s
  std::size_t top = 3;
  report_format format = report_format::table;
};

struct advice {
  bottleneck_report bottleneck;
  calibrated_model model;
  std::vector<prediction> ranked;     ///< standard what-ifs, best first
  std::vector<prediction> requested;  ///< advice_options::requested, in order
  std::vector<graph_prediction> graphs;  ///< each launch-bound stage graphed (predict_graph: a range)
};

inline advice advise(const profile_snapshot& snap, const pipeline_layout& lay, const advice_options& o = {}) {
  advice a;
  a.bottleneck = find_bottleneck(snap, lay, o.model.data);
  if (!a.bottleneck.ok) return a;
  a.model = calibrate(snap, lay, o.model);
  if (!a.model.ok) return a;
  a.ranked = standard_what_ifs(a.model);
  for (const auto& sc : o.requested) a.requested.push_back(predict(a.model, sc));
  for (const auto& f : a.bottleneck.stages)
    if (f.launch_bound) a.graphs.push_back(predict_graph(a.model, f));
  return a;
}

/// Every change of `sc` has a flag in `o.knobs` (speedups never do).
inline bool has_flags(const scenario& sc, const advice_options& o) {
  for (const auto& c : sc.changes) {
    if (c.what == change::kind::speed) return false;
    const std::string key = c.target + (c.what == change::kind::workers ? ".workers" : ".depth");
    bool found = false;
    for (const auto& kv : o.knobs) found = found || kv.first == key;
    if (!found) return false;
  }
  return !sc.changes.empty();
}

/// The best-ranked change that a flag makes, when the top `o.top` have none (nullptr otherwise).
inline const prediction* best_with_flag(const advice& a, const advice_options& o) {
  for (std::size_t i = 0; i < a.ranked.size(); ++i)
    if (has_flags(a.ranked[i].what, o)) return i < o.top ? nullptr : &a.ranked[i];
  return nullptr;
}

/// How to make a change: the flag and value when the program has one.
inline std::string how_to(const scenario& sc, const advice_options& o) {
  std::string out;
  for (const auto& c : sc.changes) {
    std::string part;
    if (c.what == change::kind::speed) {
      char b[96];
      std::snprintf(b, sizeof b, "%s %gx %s (code or hardware)", c.target.c_str(), c.value >= 1 ? c.value : 1 / c.value,
                    c.value >= 1 ? "faster" : "slower");
      part = b;
    } else {
      const std::string key = c.target + (c.what == change::kind::workers ? ".workers" : ".depth");
      part = "(no flag: " + key + ")";
      for (const auto& [k, flag] : o.knobs)
        if (k == key) part = flag + (flag.ends_with('=') ? "" : " ") + std::to_string(static_cast<long long>(c.value));
    }
    if (!out.empty()) out += ' ';
    out += part;
  }
  return out;
}

inline std::string format_advice(const advice& a, const advice_options& o) {
  using dflash::detail::append_fmt;
  const double u = o.units_per_item;
  std::string out;
  if (o.format == report_format::json) {
    out += "{\"bottleneck\":" + format_bottleneck(a.bottleneck, report_format::json);
    out += ",\"model\":";
    if (!a.model.ok) {
      out += "{\"ok\":false,\"why_not\":";
      dflash::detail::append_json_string(out, a.bottleneck.ok ? a.model.why_not : a.bottleneck.why_not);
      out += "}}";
      return out;
    }
    out += "{\"ok\":true,\"unit\":";
    dflash::detail::append_json_string(out, o.unit);
    append_fmt(out, ",\"measured\":%.3f,\"simulated\":%.3f,\"fit\":%.4f,\"cores\":%.3f,\"cpu_stretch\":%.4f,\"rough\":%s}",
               a.model.measured_items_per_s * u, a.model.simulated_items_per_s * u, a.model.fit, a.model.cores,
               a.model.cpu_stretch, a.model.rough() ? "true" : "false");
    auto list = [&](const char* name, const std::vector<prediction>& ps) {
      append_fmt(out, ",\"%s\":[", name);
      for (std::size_t i = 0; i < ps.size(); ++i) {
        out += i ? ",{\"change\":" : "{\"change\":";
        dflash::detail::append_json_string(out, ps[i].what.text());
        append_fmt(out, ",\"predicted\":%.3f,\"gain\":%.4f,\"how\":", ps[i].items_per_s * u, ps[i].gain);
        dflash::detail::append_json_string(out, how_to(ps[i].what, o));
        out += '}';
      }
      out += ']';
    };
    list("what_if", a.ranked);
    const prediction* f = best_with_flag(a, o);
    list("best_with_flag", f ? std::vector<prediction>{*f} : std::vector<prediction>{});
    list("requested", a.requested);
    out += ",\"graph\":[";
    for (std::size_t i = 0; i < a.graphs.size(); ++i) {
      const graph_prediction& g = a.graphs[i];
      out += i ? ",{\"stage\":" : "{\"stage\":";
      dflash::detail::append_json_string(out, g.stage);
      append_fmt(out,
                 ",\"low\":{\"predicted\":%.3f,\"gain\":%.4f},\"high\":{\"predicted\":%.3f,\"gain\":%.4f},"
                 "\"launch_ns\":%.1f,\"gpu_ns\":%.1f,\"work_ns\":%.1f}",
                 g.low.items_per_s * u, g.low.gain, g.high.items_per_s * u, g.high.gain, g.launch_ns, g.gpu_ns, g.work_ns);
    }
    out += "]}";
    return out;
  }
  out += format_bottleneck(a.bottleneck, report_format::table);
  if (!a.bottleneck.ok) return out;
  if (!a.model.ok) return out + "what-if: not enough data — " + a.model.why_not + "\n";
  append_fmt(out,
             "what-if (tandem-queue model, %.2f cores shared, recorded times / %.2f for CPU contention; "
             "simulated now %.0f vs measured %.0f %s, fit %+.1f%%%s):\n",
             a.model.cores, a.model.cpu_stretch, a.model.simulated_items_per_s * u, a.model.measured_items_per_s * u,
             o.unit.c_str(), 100 * a.model.fit, a.model.rough() ? " — rough: trust directions, not numbers" : "");
  auto row = [&](const prediction& p) {
    append_fmt(out, "  %+7.1f%%  %12.0f %s  %-36s %s\n", 100 * p.gain, p.items_per_s * u, o.unit.c_str(),
               p.what.text().c_str(), how_to(p.what, o).c_str());
  };
  const std::size_t n = std::min(o.top, a.ranked.size());
  for (std::size_t i = 0; i < n; ++i) row(a.ranked[i]);
  if (const prediction* f = best_with_flag(a, o)) {
    out += "best change a flag makes:\n";
    row(*f);
  }
  if (!a.requested.empty()) {
    out += "requested:\n";
    for (const auto& p : a.requested) row(p);
  }
  for (const graph_prediction& g : a.graphs)
    append_fmt(out,
               "graph %s (launch-bound): %+.1f%% to %+.1f%% (%.0f to %.0f %s): one graph launch per item "
               "(dflash::graphed); the low end if the device is busy all of its %s per item, the high end if "
               "its work is negligible; a graphed run measures which\n",
               g.stage.c_str(), 100 * g.low.gain, 100 * g.high.gain, g.low.items_per_s * u, g.high.items_per_s * u,
               o.unit.c_str(), dflash::detail::human_duration(static_cast<std::uint64_t>(g.gpu_ns)).c_str());
  return out;
}

}  // namespace dflash::analysis
