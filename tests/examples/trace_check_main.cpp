// trace_check TRACE.json STAGE...: checks a trace the example wrote (--trace)
// as a viewer needs it (support/trace_check.hpp), that every track is named
// after the thread or stream it shows, that device time sits on stream tracks
// only, and that every item can be followed through the given stages' work
// ranges in order. Exit 0 when all hold; 1 with the reasons otherwise; 2 on
// bad arguments or a file that is not trace JSON.
#include "trace_check.hpp"

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: trace_check TRACE.json STAGE... (the stages an item passes, source first)\n");
    return 2;
  }
  nlohmann::json t;
  try {
    std::ifstream f(argv[1]);
    if (!f) throw std::runtime_error("cannot open it");
    t = nlohmann::json::parse(f);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "trace_check: %s: %s\n", argv[1], e.what());
    return 2;
  }
  std::vector<std::string> want;
  for (int i = 2; i < argc; ++i) want.push_back(std::string(argv[i]) + ".work");

  auto r = dflash_test::check_trace(t);
  for (const auto& [tid, name] : r.track_names)
    if (name.rfind("thread ", 0) == 0) r.problems.push_back("track " + std::to_string(tid) + " has no name: '" + name + "'");
  std::size_t gpu = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] != "X") continue;
    const std::string name = e["name"];
    if (name.size() < 4 || name.substr(name.size() - 4) != ".gpu") continue;
    ++gpu;
    const std::string track = r.track_names[e["tid"].get<std::uint64_t>()];
    if (track.size() < 7 || track.substr(track.size() - 7) != " stream")
      r.problems.push_back(name + " on track '" + track + "', not on a stream track");
  }
  std::size_t followed = 0;
  for (const auto& [id, path] : r.paths) {
    if (path == want) {
      ++followed;
      continue;
    }
    std::string got;
    for (const auto& p : path) got += (got.empty() ? "" : " -> ") + p;
    r.problems.push_back("item " + std::to_string(id) + " goes " + got);
    if (r.problems.size() > 20) break;
  }
  if (followed == 0) r.problems.push_back("no item could be followed through the stages given");
  for (const auto& p : r.problems) std::fprintf(stderr, "trace_check: %s\n", p.c_str());
  std::printf("trace_check: %zu tracks, %zu items followed from %s to %s, %zu device ranges on stream tracks%s\n",
              r.track_names.size(), followed, want.front().c_str(), want.back().c_str(), gpu,
              r.problems.empty() ? "" : " — FAILED");
  return r.problems.empty() ? 0 : 1;
}
