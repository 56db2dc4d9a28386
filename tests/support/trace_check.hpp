#pragma once
// What a trace viewer needs of a dflash trace, checked: no two ranges of one
// track overlap partly (Perfetto and chrome://tracing would nest them
// wrongly); every flow event lies on a range of its own track; every item's
// flow starts once and ends once. Shared by the flow tests and the check of
// the example's trace (trace_check_main.cpp).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace dflash_test {

struct trace_report {
  std::vector<std::string> problems;                            // empty: the trace is well formed
  std::map<std::uint64_t, std::string> track_names;             // tid -> thread_name
  std::map<std::uint64_t, std::vector<std::string>> paths;      // item id -> range names its flow binds to, in time order
  std::map<std::uint64_t, std::vector<std::string>> path_tracks;  // item id -> the tracks of those ranges
};

inline trace_report check_trace(const nlohmann::json& t) {
  struct range {
    std::int64_t start, end;
    std::string name;
  };
  const auto ns_of = [](const nlohmann::json& us) { return std::llround(us.get<double>() * 1000.0); };
  trace_report r;
  const auto problem = [&](auto&&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    if (r.problems.size() < 20) r.problems.push_back(s.str());  // the first ones say enough
  };
  std::map<std::uint64_t, std::vector<range>> tracks;
  for (const auto& e : t.at("traceEvents")) {
    if (e["ph"] == "M" && e["name"] == "thread_name") r.track_names[e["tid"].get<std::uint64_t>()] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    const std::int64_t s = ns_of(e["ts"]);
    tracks[e["tid"].get<std::uint64_t>()].push_back({s, s + ns_of(e["dur"]), e["name"]});
  }
  // 1. each range is nested in or disjoint from the others on its track
  for (auto& [tid, rs] : tracks) {
    std::sort(rs.begin(), rs.end(), [](const range& a, const range& b) {
      return a.start != b.start ? a.start < b.start : a.end > b.end;
    });
    std::vector<std::int64_t> open;
    for (const auto& x : rs) {
      while (!open.empty() && open.back() <= x.start) open.pop_back();
      if (!open.empty() && x.end > open.back())
        problem("track '", r.track_names[tid], "': ", x.name, " [", x.start, ", ", x.end,
                ") overlaps the range before it partly (that one ends at ", open.back(), ")");
      open.push_back(x.end);
    }
  }
  // 2. every flow event binds to the innermost range around it on its track
  std::map<std::uint64_t, std::vector<std::pair<std::int64_t, std::pair<std::string, std::string>>>> steps;
  std::map<std::uint64_t, int> starts, ends;
  for (const auto& e : t["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph != "s" && ph != "t" && ph != "f") continue;
    const auto id = e["id"].get<std::uint64_t>();
    if (e["cat"] != "dflash.flow") problem("flow event of item ", id, " has category ", e["cat"].dump());
    const auto tid = e["tid"].get<std::uint64_t>();
    const std::int64_t ts = ns_of(e["ts"]);
    const range* on = nullptr;
    for (const auto& x : tracks[tid])
      if (x.start <= ts && ts <= x.end && (on == nullptr || x.start >= on->start)) on = &x;
    if (on == nullptr) {
      problem("flow event '", ph, "' of item ", id, " at ", ts, " on track '", r.track_names[tid], "' lies on no range");
      continue;
    }
    steps[id].push_back({ts, {on->name, r.track_names[tid]}});
    if (ph == "s") ++starts[id];
    if (ph == "f") {
      ++ends[id];
      if (e.value("bp", "") != "e") problem("flow end of item ", id, " does not bind to its enclosing range (bp 'e')");
    }
  }
  // 3. each item's flow starts once and ends once
  for (auto& [id, v] : steps) {
    if (starts[id] != 1 || ends[id] != 1)
      problem("item ", id, ": ", starts[id], " flow starts and ", ends[id], " flow ends (want 1 and 1)");
    std::sort(v.begin(), v.end());
    for (const auto& [ts, at] : v) {
      r.paths[id].push_back(at.first);
      r.path_tracks[id].push_back(at.second);
    }
  }
  return r;
}

}  // namespace dflash_test
