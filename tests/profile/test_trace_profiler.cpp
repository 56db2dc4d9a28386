#include <catch2/catch.hpp>
#include <dflash/profile.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/trace_profiler.hpp>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <ratio>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace dflash::literals;
using namespace std::chrono_literals;
using dflash::manual_clock;
using json = nlohmann::json;

using keys = dflash::key_set<"forward", "pack", "queue \"wait\"">;
using fake_trace = dflash::TraceProfiler<keys, manual_clock>;
using real_trace = dflash::TraceProfiler<keys>;

static_assert(dflash::ProfilerPolicy<fake_trace>);
static_assert(fake_trace::enabled);

namespace {
std::set<std::string> track_names(const json& j) {
  std::set<std::string> names;
  for (const auto& e : j.at("traceEvents"))
    if (e["name"] == "thread_name") names.insert(e["args"]["name"].get<std::string>());
  return names;
}
std::vector<json> complete_events(const json& j) {
  std::vector<json> out;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X") out.push_back(e);
  return out;
}
}  // namespace

TEST_CASE("trace JSON has exact timestamps and durations from a deterministic clock", "[trace]") {
  manual_clock::set(manual_clock::time_point{1'234'567ns});
  fake_trace t(16);
  {
    auto s = t.scope("forward"_key);
    manual_clock::advance(2'500ns);
    auto tok = t.begin("pack"_key);
    manual_clock::advance(1us);
    t.end("pack"_key, tok);
  }
  t.add("queue \"wait\""_key, 3us);  // ends now, at 1'238'067 ns

  const json j = json::parse(t.json());
  REQUIRE(j.at("displayTimeUnit") == "ns");
  REQUIRE(j.at("otherData").at("dropped_events") == 0);
  REQUIRE(j.at("otherData").at("events_per_thread") == 16);
  REQUIRE(j.at("otherData").at("threads") == 1);
  const auto x = complete_events(j);
  REQUIRE(x.size() == 3);
  // Written when each range ends: pack (inner) first, then forward.
  CHECK(x[0].at("name") == "pack");
  CHECK(x[0].at("cat") == "dflash");
  CHECK(x[0].at("ts").get<double>() == Approx(1237.067).epsilon(1e-12));
  CHECK(x[0].at("dur").get<double>() == Approx(1.0).epsilon(1e-12));
  CHECK(x[1].at("name") == "forward");
  CHECK(x[1].at("ts").get<double>() == Approx(1234.567).epsilon(1e-12));
  CHECK(x[1].at("dur").get<double>() == Approx(3.5).epsilon(1e-12));
  CHECK(x[2].at("name") == "queue \"wait\"");  // escaped in JSON, intact after parsing
  CHECK(x[2].at("cat") == "dflash.add");
  CHECK(x[2].at("ts").get<double>() == Approx(1235.067).epsilon(1e-12));
  CHECK(x[2].at("dur").get<double>() == Approx(3.0).epsilon(1e-12));
  for (const auto& e : x) CHECK(e.at("pid") == x[0].at("pid"));
  CHECK(x[0].at("tid") == 1);
  CHECK(x[1].at("tid") == 1);
  // a duration measured elsewhere goes on the thread's second track, "<thread> stream"
  CHECK(x[2].at("tid") != 1);
  bool named = false;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name" && e.at("tid") == x[2].at("tid"))
      named = e.at("args").at("name") == "thread 1 stream";
  CHECK(named);
  CHECK(t.recorded() == 3);
  CHECK(t.dropped() == 0);
}

TEST_CASE("timestamps are written exactly, with nanosecond digits", "[trace]") {
  // A steady_clock-sized value: 17 significant digits would not survive a double round trip.
  manual_clock::set(manual_clock::time_point{123'456'789'012'345'678ns});
  fake_trace t(4);
  t.add("forward"_key, 1ns);
  const std::string s = t.json();
  CHECK(s.find("\"ts\":123456789012345.677,\"dur\":0.001") != std::string::npos);
  CHECK(json::parse(s).is_object());
}

TEST_CASE("each thread gets its own track; its events stay on it", "[trace]") {
  real_trace t(1024);
  t.name_thread("main");
  { auto s = t.scope("forward"_key); }
  std::vector<std::thread> ths;
  for (int i = 0; i < 3; ++i)
    ths.emplace_back([&t, i] {
      t.name_thread("worker " + std::to_string(i));
      for (int n = 0; n <= i; ++n) {
        auto s = t.scope("pack"_key);
      }
    });
  for (auto& th : ths) th.join();

  REQUIRE(t.thread_count() == 4);
  const json j = json::parse(t.json());
  std::map<int, std::string> names;
  std::map<int, int> packs, forwards;
  for (const auto& e : j.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names[e.at("tid")] = e.at("args").at("name");
    if (e.at("ph") == "X") {
      CHECK(e.at("dur").get<double>() >= 0.0);
      (e.at("name") == "pack" ? packs : forwards)[e.at("tid")]++;
    }
  }
  REQUIRE(names.size() == 4);
  CHECK(names.at(1) == "main");
  CHECK(forwards == std::map<int, int>{{1, 1}});
  // Worker i recorded i+1 packs on its own track, whatever order they registered in.
  std::multiset<int> counts;
  for (const auto& [tid, n] : packs) {
    CHECK(tid != 1);
    CHECK(names.at(tid) == "worker " + std::to_string(n - 1));
    counts.insert(n);
  }
  CHECK(counts == std::multiset<int>{1, 2, 3});
}

TEST_CASE("a full buffer drops new events and counts them, never unbounded", "[trace]") {
  manual_clock::set(manual_clock::time_point{});
  fake_trace t(5);
  for (int i = 0; i < 12; ++i) {
    auto s = t.scope("forward"_key);
    manual_clock::advance(1us);
  }
  t.add("pack"_key, 1us);
  CHECK(t.recorded() == 5);
  CHECK(t.dropped() == 8);
  const json j = json::parse(t.json());
  CHECK(j.at("otherData").at("dropped_events") == 8);
  const auto x = complete_events(j);
  REQUIRE(x.size() == 5);
  for (std::size_t i = 0; i < x.size(); ++i) {  // the first five were kept
    CHECK(x[i].at("name") == "forward");
    CHECK(x[i].at("ts").get<double>() == Approx(static_cast<double>(i)));
  }
}

TEST_CASE("drops are counted per thread: one thread filling up does not starve another", "[trace]") {
  real_trace t(3);
  for (int i = 0; i < 10; ++i) t.add("forward"_key, 1ns);
  std::thread([&t] {
    for (int i = 0; i < 2; ++i) t.add("pack"_key, 1ns);
  }).join();
  CHECK(t.recorded() == 5);
  CHECK(t.dropped() == 7);
}

TEST_CASE("bad input is an error with a clear message", "[trace]") {
  CHECK_THROWS_WITH(fake_trace(0), Catch::Contains("events_per_thread must be at least 1"));
  fake_trace t(4);
  CHECK_THROWS_WITH(t.add("pack"_key, -1ns), Catch::Contains("negative duration for key 'pack'"));
  CHECK(t.recorded() == 0);
  CHECK_THROWS_WITH(t.write_file("/nonexistent-dir/x/trace.json"),
                    Catch::Contains("cannot open '/nonexistent-dir/x/trace.json' for writing"));
}

TEST_CASE("write_file writes the same JSON as write_json", "[trace]") {
  manual_clock::set(manual_clock::time_point{});
  fake_trace t(8);
  t.add("forward"_key, 2us);
  const auto path = std::filesystem::temp_directory_path() / "dflash_test_trace_profiler.json";
  t.write_file(path.string());
  std::ifstream f(path);
  const json from_file = json::parse(f);
  std::filesystem::remove(path);
  CHECK(from_file == json::parse(t.json()));
  CHECK(complete_events(from_file).size() == 1);
}

TEST_CASE("two profilers on one thread keep separate buffers", "[trace]") {
  real_trace a(8), b(8);
  for (int i = 0; i < 6; ++i) {
    // More live profilers than the thread's 4-entry cache: lookups fall back to the registry.
    real_trace c(2), d(2), e(2);
    c.add("forward"_key, 1ns);
    d.add("forward"_key, 1ns);
    e.add("forward"_key, 1ns);
    a.add("forward"_key, 1ns);
    b.add("pack"_key, 1ns);
    CHECK(c.thread_count() == 1);
  }
  CHECK(a.recorded() == 6);
  CHECK(b.recorded() == 6);
  CHECK(a.thread_count() == 1);
  CHECK(b.thread_count() == 1);
}

TEST_CASE("concurrent recording and writing: every event is kept or counted as dropped", "[trace][stress]") {
  constexpr int threads = 4, per_thread = 20'000;
  constexpr std::size_t capacity = 15'000;
  real_trace t(capacity);
  std::atomic<bool> done{false};
  std::thread writer([&] {
    while (!done.load()) {
      const json j = json::parse(t.json());  // valid at every moment
      CHECK(j.at("traceEvents").is_array());
    }
  });
  std::vector<std::thread> ths;
  for (int i = 0; i < threads; ++i)
    ths.emplace_back([&t] {
      for (int n = 0; n < per_thread; ++n) {
        auto s = t.scope("forward"_key);
      }
    });
  for (auto& th : ths) th.join();
  done = true;
  writer.join();
  CHECK(t.recorded() == threads * capacity);
  CHECK(t.dropped() == threads * (per_thread - capacity));
  const json j = json::parse(t.json());
  std::map<int, std::size_t> per_tid;
  for (const auto& e : complete_events(j)) ++per_tid[e.at("tid")];
  CHECK(per_tid.size() == threads);
  for (const auto& [tid, n] : per_tid) CHECK(n == capacity);
}

// For the trace: no bogus event from an out-of-range or NaN add().
TEST_CASE("add(): out-of-range and non-finite durations are rejected, nothing recorded", "[trace]") {
  using years = std::chrono::duration<std::int64_t, std::ratio<31556952>>;
  using dsec = std::chrono::duration<double>;
  fake_trace t;
  CHECK_THROWS_WITH(t.add("forward"_key, years(300)), Catch::Contains("too large") && Catch::Contains("forward"));
  CHECK_THROWS_WITH(t.add("forward"_key, years(585)), Catch::Contains("too large"));
  CHECK_THROWS_WITH(t.add("forward"_key, dsec(std::numeric_limits<double>::quiet_NaN())), Catch::Contains("NaN"));
  CHECK_THROWS_WITH(t.add("forward"_key, dsec(std::numeric_limits<double>::infinity())), Catch::Contains("infinite"));
  CHECK(t.recorded() == 0);
}

// For the trace: a thread name that is not UTF-8 keeps the JSON valid.
TEST_CASE("trace JSON stays valid with an invalid UTF-8 thread name", "[trace]") {
  real_trace t;
  t.name_thread("worker\xff#1");
  t.add("forward"_key, 1us);
  json j;
  REQUIRE_NOTHROW(j = json::parse(t.json()));
  bool found = false;
  for (const auto& e : j["traceEvents"])
    if (e["name"] == "thread_name" && e["args"]["name"] == "worker\xef\xbf\xbd#1") found = true;
  CHECK(found);
}

// Workers name their trace track after their stage; the
// call is policy-generic (a no-op where a policy has no thread names).
TEST_CASE("name_this_thread names the trace track, through a Composite too; no-op elsewhere", "[trace]") {
  real_trace t;
  dflash::AccumulatingProfiler<keys> acc;
  dflash::Composite<dflash::AccumulatingProfiler<keys>, real_trace> both(acc, t);
  std::thread w([&] {
    dflash::name_this_thread(both, "target_forward#2");
    dflash::name_this_thread(dflash::NullProfiler{}, "ignored");
    dflash::name_this_thread(acc, "ignored");
    auto s = both.scope("forward"_key);
  });
  w.join();
  const auto names = track_names(json::parse(t.json()));
  CHECK(names.count("target_forward#2") == 1);
  CHECK(names.count("thread 1") == 0);
}

TEST_CASE("durations added one after another never overlap partly on the stream track", "[trace]") {
  manual_clock::set(manual_clock::time_point{1'000'000ns});
  fake_trace t(16);
  t.add("forward"_key, 5us);  // [995, 1000] µs
  manual_clock::advance(1us);
  t.add("forward"_key, 4us);  // would start at 997 µs, inside the first: drawn from 1000 µs, 4 µs long
  const auto x = complete_events(json::parse(t.json()));
  REQUIRE(x.size() == 2);
  CHECK(x[0].at("ts").get<double>() == Approx(995.0).epsilon(1e-12));
  CHECK(x[1].at("ts").get<double>() == Approx(1000.0).epsilon(1e-12));
  CHECK(x[1].at("dur").get<double>() == Approx(4.0).epsilon(1e-12));
}

TEST_CASE("a zero duration added (a wait that did not wait) is not drawn", "[trace]") {
  manual_clock::set(manual_clock::time_point{1'000'000ns});
  fake_trace t(16);
  t.add("queue \"wait\""_key, 0ns);
  t.add("forward"_key, 3us);
  const auto x = complete_events(json::parse(t.json()));
  REQUIRE(x.size() == 1);
  CHECK(x[0].at("name") == "forward");
}

TEST_CASE("a thread labelled elsewhere (a host-twin stream running a worker's work) gets a named track", "[trace]") {
  real_trace t;
  std::thread w([&] {
    dflash::detail::thread_label() = "postprocess#0 work (host twin)";
    auto s = t.scope("pack"_key);
  });
  w.join();
  const auto names = track_names(json::parse(t.json()));
  CHECK(names.count("postprocess#0 work (host twin)") == 1);
  CHECK(names.count("thread 1") == 0);
}

TEST_CASE("a flow event binds to the stage's range, not to a zone nested in it", "[trace]") {
  manual_clock::set(manual_clock::time_point{1'000'000ns});
  fake_trace t(16);
  {
    auto outer = t.scope("forward"_key);  // [1000, 1010] µs
    {
      auto inner = t.scope("pack"_key);  // [1000, 1010] µs too: from the outer's first to its last ns
      manual_clock::advance(10us);
    }
  }
  t.flow_step("forward"_key, 7, dflash::flow_phase::start);
  manual_clock::advance(1us);
  {
    auto outer = t.scope("forward"_key);  // [1011, 1015] µs, a zone in its middle
    manual_clock::advance(1us);
    {
      auto inner = t.scope("pack"_key);
      manual_clock::advance(2us);
    }
    manual_clock::advance(1us);
  }
  t.flow_step("forward"_key, 7, dflash::flow_phase::end);
  const json j = json::parse(t.json());
  std::vector<double> at;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "s" || e["ph"] == "f") at.push_back(e["ts"].get<double>());
  REQUIRE(at.size() == 2);
  // the first range is tiled by its zone: the flow falls back to its midpoint
  CHECK(at[0] == Approx(1005.0).epsilon(1e-12));
  // the second has room before its zone: 1 ns after its start
  CHECK(at[1] == Approx(1011.001).epsilon(1e-12));
}
