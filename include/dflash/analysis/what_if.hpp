#pragma once
// What-if predictions: the throughput a pipeline would reach with one more
// worker on a stage, a deeper or shallower link, or a stage k times faster (a
// virtual speedup, as Coz does), predicted from one profile.
//
// calibrate() turns a profile window and the layout into a tandem_simulator
// model: per stage the recorded distribution of its binding key (<stage>.work,
// or <stage>.gpu where that is larger), its workers, each link's kind and depth.
// CPU is a shared resource: recorded times are wall times, stretched when more
// stage threads were running than cores were free. The model divides them by
// that stretch (the mean number of busy stage threads over the cores, or over
// the cores the process really got when its CPU time is given) to get CPU
// demand, and the simulation shares `cores` among the items in service. So a
// fifth worker on a 2-core machine buys nothing in the model either.
//
// predict() simulates the changed model and reports
//   measured throughput x simulated(changed) / simulated(base),
// with the same seeds for both (common random numbers): the model's error in
// absolute level cancels, and `fit` says how far the simulated base was from
// the measured one (a large misfit is printed next to the predictions).
//
// Changes are written `<stage>.workers=N`, `<link>.depth=N`, `<stage>.speed=F`
// (F > 1: F times faster, F < 1: slower), several joined by commas.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "dflash/analysis/bottleneck.hpp"
#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/analysis/service_distribution.hpp"
#include "dflash/analysis/tandem_simulator.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::analysis {

struct change {
  enum class kind { workers, depth, speed };
  kind what = kind::workers;
  std::string target;  ///< a stage (workers, speed) or a link (depth)
  double value = 1;

  [[nodiscard]] std::string text() const {
    std::string v;
    if (what == kind::speed) {
      char b[32];
      std::snprintf(b, sizeof b, "%g", value);
      v = b;
    } else {
      v = std::to_string(static_cast<long long>(value));
    }
    return target + (what == kind::workers ? ".workers=" : what == kind::depth ? ".depth=" : ".speed=") + v;
  }
};

/// One configuration to predict: a list of changes to the measured one.
struct scenario {
  std::vector<change> changes;
  [[nodiscard]] std::string text() const {
    std::string s;
    for (const auto& c : changes) {
      if (!s.empty()) s += ',';
      s += c.text();
    }
    return s.empty() ? "as measured" : s;
  }
};

/// Parses "target_forward.workers=3,hs_queue.depth=8,drafter.speed=2" against
/// a layout; std::invalid_argument names what is wrong (unknown stage or
/// link, a value out of range, a malformed part). Nothing is clamped.
inline scenario parse_scenario(std::string_view text, const pipeline_layout& lay) {
  scenario sc;
  auto bad = [&](const std::string& why) {
    return std::invalid_argument("what-if '" + std::string(text) + "': " + why);
  };
  std::size_t at = 0;
  while (at <= text.size()) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    const std::string_view part = text.substr(at, comma - at);
    at = comma + 1;
    const std::size_t dot = part.rfind('.', part.find('=')), eq = part.find('=');
    if (dot == std::string_view::npos || eq == std::string_view::npos || eq < dot)
      throw bad("expected <stage>.workers=N, <link>.depth=N or <stage>.speed=F, got '" + std::string(part) + "'");
    change c;
    c.target = std::string(part.substr(0, dot));
    const std::string_view field = part.substr(dot + 1, eq - dot - 1);
    const std::string value(part.substr(eq + 1));
    char* end = nullptr;
    const double v = value.empty() ? NAN : std::strtod(value.c_str(), &end);
    if (value.empty() || end != value.c_str() + value.size() || !std::isfinite(v))
      throw bad("'" + value + "' is not a number");
    if (field == "workers" || field == "depth") {
      c.what = field == "workers" ? change::kind::workers : change::kind::depth;
      if (v < 1 || v > 1e6 || v != std::floor(v)) throw bad(std::string(field) + " must be an integer in [1, 1000000], got " + value);
      if (c.what == change::kind::workers && lay.stage_index(c.target) == pipeline_layout::npos)
        throw bad("no stage named '" + c.target + "'");
      if (c.what == change::kind::depth && lay.link_index(c.target) == pipeline_layout::npos)
        throw bad("no link named '" + c.target + "'");
      if (c.what == change::kind::workers && lay.stages[lay.stage_index(c.target)].in_order && v != 1)
        throw bad("stage '" + c.target + "' is in_order and runs on exactly one worker");
    } else if (field == "speed") {
      c.what = change::kind::speed;
      if (!(v >= 0.01 && v <= 100)) throw bad("speed must be in [0.01, 100] (2 = twice as fast), got " + value);
      if (lay.stage_index(c.target) == pipeline_layout::npos) throw bad("no stage named '" + c.target + "'");
    } else {
      throw bad("unknown field '" + std::string(field) + "' (workers, depth or speed)");
    }
    c.value = v;
    sc.changes.push_back(std::move(c));
  }
  return sc;
}

struct model_options {
  double cores = 0;                  ///< CPU cores; 0 = std::thread::hardware_concurrency()
  double process_cpu_ns = 0;         ///< CPU time the process used over the window (getrusage); 0 = unknown
  std::uint64_t seed = 1;
  std::uint64_t max_items = 4000;    ///< items per simulated run (the window's count, at most this)
  std::uint64_t min_sim_items = 4000;  ///< items simulated in all per prediction (replications fill it up)
  double misfit = 0.25;              ///< |simulated base / measured - 1| above this: predictions flagged as rough
  bottleneck_options data;           ///< the same "enough data" rules as the bottleneck section
};

struct calibrated_model {
  bool ok = false;
  std::string why_not;
  pipeline_layout layout;
  sim_model model;
  sim_options sim;
  double measured_items_per_s = 0;
  double simulated_items_per_s = 0;  ///< the base model
  double fit = 0;                    ///< simulated / measured - 1
  double cores = 0;                  ///< what the model shares among CPU stages
  double cpu_stretch = 1;            ///< recorded wall time / CPU demand (>= 1)
  [[nodiscard]] bool rough() const noexcept { return std::abs(fit) > misfit_limit; }
  double misfit_limit = 0.25;
};

inline calibrated_model calibrate(const profile_snapshot& snap, const pipeline_layout& lay, const model_options& opt = {}) {
  calibrated_model cm;
  cm.layout = lay;
  cm.misfit_limit = opt.misfit;
  // The model follows each item from stage to stage: across a link it has no
  // model for, or one that drops or multiplies items, any number it gave would be wrong.
  for (const auto& l : lay.links) {
    if (!l.no_model.empty()) {
      cm.why_not = "no model for link '" + l.name + "' (" + l.no_model + ")";
      return cm;
    }
    if (l.items_out != l.items_in) {
      cm.why_not = "no model for link '" + l.name + "': it passes " + std::to_string(l.items_out) + " item(s) for every " +
                   std::to_string(l.items_in) + ", and the model follows each item once";
      return cm;
    }
  }
  const bottleneck_report b = find_bottleneck(snap, lay, opt.data);
  if (!b.ok) {
    cm.why_not = b.why_not;
    return cm;
  }
  const double hw = opt.cores > 0 ? opt.cores : std::max(1u, std::thread::hardware_concurrency());
  const double W = static_cast<double>(snap.window_ns);
  sim_model m;
  double cpu_busy = 0;  // wall time of stage work that needs a CPU, summed over stages
  for (std::size_t j = 0; j < lay.stages.size(); ++j) {
    const stage_layout& st = lay.stages[j];
    const stage_finding& f = b.stages[j];
    const key_stats* k = snap.find(st.name + (f.gpu_binds ? ".gpu" : ".work"));
    sim_stage s;
    s.workers = st.workers;
    s.service = service_distribution::from_stats(*k);
    s.uses_cpu = !f.gpu_binds || lay.device_work_on_cpu;
    if (s.uses_cpu) cpu_busy += static_cast<double>(k->total_ns);
    m.stages.push_back(std::move(s));
  }
  for (const auto& l : lay.links) m.links.push_back({l.kind, l.depth});
  // Cores: the machine's, or — when the process got less CPU than it had
  // runnable stage work for (other processes) — the cores it really got.
  double cores = hw;
  const double busy_threads = cpu_busy / W;
  if (opt.process_cpu_ns > 0) {
    const double got = opt.process_cpu_ns / W;
    if (busy_threads > got * 1.05) cores = std::clamp(got, 0.05, hw);
  }
  cm.cores = cores;
  cm.cpu_stretch = std::max(1.0, busy_threads / cores);
  for (auto& s : m.stages)
    if (s.uses_cpu) s.service = s.service.scaled(1.0 / cm.cpu_stretch);
  m.cores = cores;
  cm.model = std::move(m);
  cm.sim.seed = opt.seed;
  cm.sim.items = std::clamp<std::uint64_t>(b.items, 1, opt.max_items);
  cm.sim.replications = static_cast<unsigned>(std::clamp<std::uint64_t>((opt.min_sim_items + cm.sim.items - 1) / cm.sim.items, 1, 64));
  cm.measured_items_per_s = b.items_per_s;
  cm.simulated_items_per_s = simulate(cm.model, cm.sim).items_per_s;
  cm.fit = cm.measured_items_per_s > 0 ? cm.simulated_items_per_s / cm.measured_items_per_s - 1 : 0;
  cm.ok = cm.simulated_items_per_s > 0;
  if (!cm.ok) cm.why_not = "the model of this window finished no item";
  return cm;
}

struct prediction {
  scenario what;
  double items_per_s = 0;  ///< measured x simulated(changed) / simulated(base)
  double gain = 0;         ///< items_per_s / measured - 1
};

/// The model with `sc` applied (std::invalid_argument for a target it does not have).
inline sim_model apply(const calibrated_model& cm, const scenario& sc) {
  sim_model m = cm.model;
  for (const auto& c : sc.changes) {
    if (c.what == change::kind::depth) {
      const std::size_t l = cm.layout.link_index(c.target);
      if (l == pipeline_layout::npos) throw std::invalid_argument("what-if: no link named '" + c.target + "'");
      m.links[l].depth = static_cast<std::size_t>(c.value);
    } else {
      const std::size_t j = cm.layout.stage_index(c.target);
      if (j == pipeline_layout::npos) throw std::invalid_argument("what-if: no stage named '" + c.target + "'");
      if (c.what == change::kind::workers) m.stages[j].workers = static_cast<std::size_t>(c.value);
      else m.stages[j].service = m.stages[j].service.scaled(1.0 / c.value);
    }
  }
  return m;
}

inline prediction predict(const calibrated_model& cm, const scenario& sc) {
  if (!cm.ok) throw std::logic_error("dflash::analysis::predict: the model is not calibrated (" + cm.why_not + ")");
  prediction p;
  p.what = sc;
  const double sim = simulate(apply(cm, sc), cm.sim).items_per_s;
  p.items_per_s = cm.measured_items_per_s * sim / cm.simulated_items_per_s;
  p.gain = p.items_per_s / cm.measured_items_per_s - 1;
  return p;
}

/// "Graph <stage>": a launch-bound device stage's launches replaced by one graph launch per item
/// (dflash::graphed), predicted as a range, because the two measured times bound it but do not fix
/// it. An ungraphed stage's .gpu runs from an event before its launches to the end of its work, so
/// when launches are slow it holds the device's wait for them and says nothing of how long the
/// device itself is busy. Graphed, the stage's time per item becomes the larger of the host's time
/// outside its launches (.work - .launch) and the device's busy time, somewhere in [0, .gpu]:
///   low   the device busy all of .gpu: only the launches' host time goes
///   high  the device's work negligible: only the host's time outside the launches stays (at least
///         1 % of the stage's time: a graph launch is not free)
/// Where the truth lies, one graphed run measures: its .gpu is no longer paced by launches.
struct graph_prediction {
  std::string stage;
  prediction low, high;
  double launch_ns = 0, gpu_ns = 0, work_ns = 0;  ///< the measured means per item it comes from
};

inline graph_prediction predict_graph(const calibrated_model& cm, const stage_finding& f) {
  graph_prediction g;
  g.stage = f.name;
  g.launch_ns = f.launch_ns;
  g.gpu_ns = f.gpu_ns;
  g.work_ns = f.work_ns;
  const double was = f.mean_service_ns, outside = std::max(0.0, f.work_ns - f.launch_ns);
  // As speedups of the stage's recorded times (its distribution keeps its shape), never a slowdown.
  const auto as_speed = [was](double now) { return std::clamp(was / std::max(now, 1e-9), 1.0, 100.0); };
  g.low = predict(cm, {{{change::kind::speed, f.name, as_speed(std::max(outside, f.gpu_ns))}}});
  g.high = predict(cm, {{{change::kind::speed, f.name, as_speed(std::max(outside, 0.01 * was))}}});
  return g;
}

/// The standard questions, best predicted gain first: each stage with one
/// more worker (not in_order ones, not the source: a source is rarely safe to
/// run twice), each queue or device link twice and half as deep, each stage
/// twice as fast.
inline std::vector<prediction> standard_what_ifs(const calibrated_model& cm) {
  std::vector<prediction> out;
  if (!cm.ok) return out;
  const pipeline_layout& lay = cm.layout;
  for (std::size_t j = 1; j < lay.stages.size(); ++j)
    if (!lay.stages[j].in_order)
      out.push_back(predict(cm, {{{change::kind::workers, lay.stages[j].name, double(lay.stages[j].workers + 1)}}}));
  for (const auto& l : lay.links) {
    if (l.kind == model_kind::direct) continue;
    out.push_back(predict(cm, {{{change::kind::depth, l.name, double(l.depth * 2)}}}));
    if (l.depth > 1) out.push_back(predict(cm, {{{change::kind::depth, l.name, double(std::max<std::size_t>(1, l.depth / 2))}}}));
  }
  for (const auto& s : lay.stages) out.push_back(predict(cm, {{{change::kind::speed, s.name, 2.0}}}));
  std::stable_sort(out.begin(), out.end(), [](const prediction& a, const prediction& b) { return a.gain > b.gain; });
  return out;
}

}  // namespace dflash::analysis
