#pragma once
// Which stage limits throughput, from one profile window and the pipeline's
// layout. Computed only when asked (a report); nothing on the recording path.
//
// Per stage, over the window W with m workers:
//   utilisation = busy / (m x W), busy = total of <stage>.work, or of
//                 <stage>.gpu for a device stage when that is larger (the
//                 device work, not the host call, binds that stage);
//   blocked     = <output link>.push_wait / (m x W): done, waiting for room downstream;
//   starved     = (<stage>.wait - <output link>.push_wait) / (m x W): waiting for input
//                 (an empty queue, or the device work that writes its input).
// A device stage is launch-bound when the host's enqueueing of its work per item
// (<stage>.launch) is at least launch_bound_ratio x its device time per item (<stage>.gpu).
// .gpu runs from an event recorded before the call to one after the work, so when launches
// are slower than the work they launch it holds the device's wait for them: .gpu close to
// .launch means the device time is mostly that wait, and fewer launches per item (a CUDA
// graph of the stage's work) would pay. Device work that outlasts its launches gives a .gpu
// well above .launch. A stage whose launches fill less than launch_bound_share of its
// workers x window is not named: there is nothing to win there.
// The limiting stage is the busiest one; the evidence line says how busy it
// is, whether the stage before it is blocked on it and whether the stage
// after it is starved by it. A window with too few items, a stage that never
// recorded, or times that cannot be (a stage busier than its workers x W: a
// clock anomaly) give `ok = false` with the reason — never a confident guess.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "dflash/analysis/pipeline_layout.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::analysis {

struct bottleneck_options {
  std::uint64_t min_items = 20;        ///< fewer items through the sink: not enough data
  std::uint64_t min_window_ns = 10'000'000;  ///< 10 ms
  double anomaly_tolerance = 1.10;     ///< a stage busy more than this x (workers x window): clock anomaly
  double saturated = 0.60;             ///< below this utilisation no stage is called limiting
  double launch_bound_ratio = 0.8;     ///< launch per item >= this x device time per item: launch-bound,
  double launch_bound_share = 0.05;    ///< if launches fill at least this of the workers x window
};

struct stage_finding {
  std::string name;
  std::size_t workers = 1;
  double utilisation = 0;  ///< busy / (workers x window)
  double starved = 0;      ///< waiting for input / (workers x window)
  double blocked = 0;      ///< waiting for room downstream / (workers x window)
  bool gpu_binds = false;  ///< busy time is <stage>.gpu, not <stage>.work
  double mean_service_ns = 0;  ///< per item, of the binding key
  double work_ns = 0;          ///< per item, <stage>.work (the host's call)
  double launch_ns = 0;        ///< device stages: host enqueueing per item (<stage>.launch), 0 if unrecorded
  double gpu_ns = 0;           ///< device stages: device time per item (<stage>.gpu), 0 if unrecorded
  double stream_busy = 0;      ///< device stages: <stage>.gpu / (workers x window) (waits for launches included)
  bool launch_bound = false;   ///< see bottleneck_options::launch_bound_ratio
  std::string state;       ///< "limiting", "blocked", "starved", "busy", "light"
};

struct bottleneck_report {
  bool ok = false;
  std::string why_not;  ///< when !ok: what data is missing or wrong
  double window_s = 0;
  std::uint64_t items = 0;  ///< finished by the sink
  double items_per_s = 0;
  std::vector<stage_finding> stages;
  std::size_t limiting = pipeline_layout::npos;
  std::string evidence;  ///< one line: why that stage
};

namespace detail {
inline std::string pct(double f) {
  char b[32];
  std::snprintf(b, sizeof b, "%.0f%%", 100.0 * f);
  return b;
}
inline const key_stats* recorded(const profile_snapshot& s, const std::string& name) {
  const key_stats* k = s.find(name);
  return k && k->count ? k : nullptr;
}
inline double total_of(const profile_snapshot& s, const std::string& name) {
  const key_stats* k = recorded(s, name);
  return k ? static_cast<double>(k->total_ns) : 0.0;
}
}  // namespace detail

inline bottleneck_report find_bottleneck(const profile_snapshot& snap, const pipeline_layout& lay,
                                         const bottleneck_options& opt = {}) {
  bottleneck_report r;
  auto fail = [&](std::string why) {
    r.ok = false;
    r.why_not = std::move(why);
    return r;
  };
  if (!lay.well_formed()) return fail("the pipeline layout is malformed (stages, links, workers or depths)");
  r.window_s = static_cast<double>(snap.window_ns) / 1e9;
  const std::string& sink = lay.stages.back().name;
  if (const key_stats* k = detail::recorded(snap, sink + ".work")) r.items = k->count;
  if (snap.window_ns < opt.min_window_ns)
    return fail("the window is " + std::to_string(snap.window_ns / 1000) + " us long (need at least " +
                std::to_string(opt.min_window_ns / 1'000'000) + " ms)");
  const double W = static_cast<double>(snap.window_ns);
  // Stages joined by direct links run on the threads of their segment's
  // parallel stage: their waits (for a serial stage's turn) add up over those threads.
  std::vector<std::size_t> threads(lay.stages.size());
  for (std::size_t a = 0; a < lay.stages.size();) {
    std::size_t b = a, most = lay.stages[a].workers;
    while (b + 1 < lay.stages.size() && lay.links[b].kind == model_kind::direct) most = std::max(most, lay.stages[++b].workers);
    for (std::size_t k = a; k <= b; ++k) threads[k] = most;
    a = b + 1;
  }
  for (std::size_t j = 0; j < lay.stages.size(); ++j) {
    const stage_layout& st = lay.stages[j];
    const key_stats* work = detail::recorded(snap, st.name + ".work");
    if (!work) return fail("stage " + st.name + " never recorded (" + st.name + ".work has no record in this window)");
    stage_finding f;
    f.name = st.name;
    f.workers = st.workers;
    double busy = static_cast<double>(work->total_ns);
    f.mean_service_ns = work->mean_ns();
    f.work_ns = f.mean_service_ns;
    const double cap = W * static_cast<double>(st.workers);
    if (st.device)
      if (const key_stats* gpu = detail::recorded(snap, st.name + ".gpu")) {
        f.gpu_ns = gpu->mean_ns();
        f.stream_busy = static_cast<double>(gpu->total_ns) / cap;
        if (static_cast<double>(gpu->total_ns) > busy) {
          busy = static_cast<double>(gpu->total_ns);
          f.gpu_binds = true;
          f.mean_service_ns = gpu->mean_ns();
        }
        if (const key_stats* launch = detail::recorded(snap, st.name + ".launch")) {
          f.launch_ns = launch->mean_ns();
          f.launch_bound = f.launch_ns >= opt.launch_bound_ratio * f.gpu_ns &&
                           static_cast<double>(launch->total_ns) >= opt.launch_bound_share * cap;
        }
      }
    const double thread_cap = W * static_cast<double>(threads[j]);
    const double push = j + 1 < lay.stages.size() ? detail::total_of(snap, lay.links[j].name + ".push_wait") : 0.0;
    const double wait = detail::total_of(snap, st.name + ".wait");
    f.utilisation = busy / cap;
    f.blocked = push / thread_cap;
    f.starved = std::max(0.0, wait - push) / thread_cap;
    const double recorded = static_cast<double>(work->total_ns) + wait;
    if (f.utilisation > opt.anomaly_tolerance || recorded > opt.anomaly_tolerance * thread_cap)
      return fail("clock anomaly: stage " + st.name + " recorded " + detail::pct(recorded / thread_cap) + " of its " +
                  std::to_string(threads[j]) + " thread(s) x window (work + wait cannot exceed 100 %)");
    r.stages.push_back(std::move(f));
  }
  if (r.items < opt.min_items)
    return fail("only " + std::to_string(r.items) + " item(s) reached the sink " + sink + " in this window (need at least " +
                std::to_string(opt.min_items) + ")");
  r.items_per_s = static_cast<double>(r.items) / r.window_s;
  std::size_t top = 0;
  for (std::size_t j = 1; j < r.stages.size(); ++j)
    if (r.stages[j].utilisation > r.stages[top].utilisation) top = j;
  for (auto& f : r.stages)
    f.state = f.blocked >= 0.2 && f.blocked >= f.starved ? "blocked"
              : f.starved >= 0.2                        ? "starved"
              : f.utilisation >= opt.saturated          ? "busy"
                                                        : "light";
  r.ok = true;
  const stage_finding& b = r.stages[top];
  std::string ev = b.name + " busy " + detail::pct(b.utilisation) + " of " + std::to_string(b.workers) + " worker" +
                   (b.workers == 1 ? "" : "s") +
                   (b.launch_bound ? " (launches bind)" : b.gpu_binds ? " (device time binds)" : "");
  if (top > 0) {
    const stage_finding& up = r.stages[top - 1];
    ev += "; " + up.name + " before it blocked " + detail::pct(up.blocked) + " on " + lay.links[top - 1].name;
  }
  if (top + 1 < r.stages.size()) {
    const stage_finding& dn = r.stages[top + 1];
    ev += "; " + dn.name + " after it starved " + detail::pct(dn.starved);
  }
  ev += "; it waits for input " + detail::pct(b.starved) + " and for room " + detail::pct(b.blocked);
  if (b.launch_bound)
    ev += "; launch-bound: the host enqueues " + dflash::detail::human_duration(static_cast<std::uint64_t>(b.launch_ns)) +
          " per item, the device's time per item is " +
          dflash::detail::human_duration(static_cast<std::uint64_t>(b.gpu_ns)) +
          " including its wait for them: fewer launches per item (one CUDA graph of the stage's work) would pay";
  if (b.utilisation < opt.saturated) {
    r.evidence = "no stage is saturated (busiest: " + ev +
                 "): throughput is set by waits — CPU contention, latency or too little parallelism, not one stage";
    return r;
  }
  r.limiting = top;
  r.stages[top].state = "limiting";
  r.evidence = ev;
  return r;
}

/// The bottleneck section: one row per stage, then the verdict and its evidence.
inline std::string format_bottleneck(const bottleneck_report& r, report_format f = report_format::table) {
  using dflash::detail::append_fmt;
  std::string out;
  if (f == report_format::json) {
    out += "{\"ok\":";
    out += r.ok ? "true" : "false";
    if (!r.ok) {
      out += ",\"why_not\":";
      dflash::detail::append_json_string(out, r.why_not);
      out += '}';
      return out;
    }
    append_fmt(out, ",\"window_s\":%.6f,\"items\":%llu,\"items_per_s\":%.3f,\"limiting\":", r.window_s,
               static_cast<unsigned long long>(r.items), r.items_per_s);
    if (r.limiting == pipeline_layout::npos) out += "null";
    else dflash::detail::append_json_string(out, r.stages[r.limiting].name);
    out += ",\"evidence\":";
    dflash::detail::append_json_string(out, r.evidence);
    out += ",\"stages\":[";
    for (std::size_t j = 0; j < r.stages.size(); ++j) {
      const auto& s = r.stages[j];
      out += j ? ",{\"name\":" : "{\"name\":";
      dflash::detail::append_json_string(out, s.name);
      append_fmt(out, ",\"workers\":%zu,\"utilisation\":%.4f,\"starved\":%.4f,\"blocked\":%.4f,\"binding\":\"%s\","
                      "\"mean_service_ns\":%.1f,\"state\":\"%s\",\"launch_ns\":%.1f,\"gpu_ns\":%.1f,"
                      "\"stream_busy\":%.4f,\"launch_bound\":%s}",
                 s.workers, s.utilisation, s.starved, s.blocked, s.gpu_binds ? "gpu" : "work", s.mean_service_ns,
                 s.state.c_str(), s.launch_ns, s.gpu_ns, s.stream_busy, s.launch_bound ? "true" : "false");
    }
    out += "]}";
    return out;
  }
  if (!r.ok) return "bottleneck: not enough data — " + r.why_not + "\n";
  std::size_t w = 5;
  for (const auto& s : r.stages) w = std::max(w, s.name.size());
  const int wi = static_cast<int>(w);
  append_fmt(out, "bottleneck over %.3f s (%llu items, %.1f items/s)\n", r.window_s,
             static_cast<unsigned long long>(r.items), r.items_per_s);
  append_fmt(out, "%-*s %7s %11s %8s %8s %12s  %s\n", wi, "stage", "workers", "utilisation", "starved", "blocked",
             "per item", "state");
  for (const auto& s : r.stages)
    append_fmt(out, "%-*s %7zu %10.1f%% %7.1f%% %7.1f%% %12s  %s%s\n", wi, s.name.c_str(), s.workers,
               100 * s.utilisation, 100 * s.starved, 100 * s.blocked,
               dflash::detail::human_duration(static_cast<std::uint64_t>(s.mean_service_ns + 0.5)).c_str(),
               s.state.c_str(), s.launch_bound ? " (launch-bound)" : s.gpu_binds ? " (gpu)" : "");
  if (r.limiting != pipeline_layout::npos) out += "limiting stage: " + r.evidence + "\n";
  else out += r.evidence + "\n";
  for (std::size_t j = 0; j < r.stages.size(); ++j) {
    const auto& s = r.stages[j];
    if (s.launch_bound && j != r.limiting)
      append_fmt(out, "launch-bound: %s enqueues %s per item; its device time per item is %s, its wait for them included\n",
                 s.name.c_str(), dflash::detail::human_duration(static_cast<std::uint64_t>(s.launch_ns)).c_str(),
                 dflash::detail::human_duration(static_cast<std::uint64_t>(s.gpu_ns)).c_str());
  }
  return out;
}

}  // namespace dflash::analysis
