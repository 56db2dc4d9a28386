#include <catch2/catch.hpp>
#include <dflash/profile.hpp>
#include <nlohmann/json.hpp>

#include <mutex>
#include <sstream>
#include <string>

using namespace dflash::literals;
using namespace std::chrono_literals;
using dflash::manual_clock;

using profiler = dflash::AccumulatingProfiler<dflash::key_set<"queue_wait", "forward", "drafter_step">, manual_clock>;

namespace {
profiler& filled() {
  static profiler p;
  // call_once, not `static bool once = [] {...}();`: clang 14 tries that
  // initializer as a constant expression and crashes (segfault) printing the
  // `"forward"_key` call in its diagnostic (a clang 14 bug, see README).
  static std::once_flag once;
  std::call_once(once, [] {
    manual_clock::set(manual_clock::time_point{});
    p.clear();
    p.add("forward"_key, 2ms);
    p.add("forward"_key, 4ms);
    p.add("queue_wait"_key, 500us);
    manual_clock::advance(10ms);
  });
  return p;
}
}  // namespace

TEST_CASE("summary() is a table: header, one row per key in key_set order", "[report]") {
  const std::string t = filled().summary();
  std::istringstream in(t);
  std::string title, header, r1, r2, r3, extra;
  std::getline(in, title);
  std::getline(in, header);
  std::getline(in, r1);
  std::getline(in, r2);
  std::getline(in, r3);
  CHECK(title == "profile over 0.010 s");
  CHECK(header.find("stage") == 0);
  for (const char* col : {"count", "total s", "mean ms", "p50 ms", "p90 ms", "p99 ms", "max ms", "% wall"})
    CHECK(header.find(col) != std::string::npos);
  CHECK(r1.rfind("queue_wait", 0) == 0);
  CHECK(r2.rfind("forward", 0) == 0);
  CHECK(r3.rfind("drafter_step", 0) == 0);
  // forward: 2 calls, 6 ms total = 0.006 s, mean 3 ms, max 4 ms, 60 % of a 10 ms window.
  std::istringstream row(r2.substr(std::string("forward").size()));
  std::string count, total, mean, p50, p90, p99, max, share;
  row >> count >> total >> mean >> p50 >> p90 >> p99 >> max >> share;
  CHECK(count == "2");
  CHECK(total == "0.006");
  CHECK(mean == "3.000");
  CHECK(max == "4.000");
  CHECK(share == "60.0");
  CHECK(r3.find(" - ") != std::string::npos);  // a key never hit shows dashes, not zeros
  CHECK_FALSE(std::getline(in, extra));
}

TEST_CASE("JSON report round-trips every value", "[report]") {
  const auto snap = filled().snapshot();
  const auto j = nlohmann::json::parse(filled().summary(dflash::report_format::json));
  REQUIRE(j.at("window_ns").get<std::uint64_t>() == snap.window_ns);
  REQUIRE(j.at("keys").size() == snap.keys.size());
  for (std::size_t i = 0; i < snap.keys.size(); ++i) {
    const auto& k = snap.keys[i];
    const auto& jk = j["keys"][i];
    CHECK(jk.at("name").get<std::string>() == k.name);
    CHECK(jk.at("count").get<std::uint64_t>() == k.count);
    CHECK(jk.at("total_ns").get<std::uint64_t>() == k.total_ns);
    CHECK(jk.at("min_ns").get<std::uint64_t>() == k.min_ns);
    CHECK(jk.at("max_ns").get<std::uint64_t>() == k.max_ns);
    CHECK(jk.at("mean_ns").get<double>() == Approx(k.mean_ns()));
    CHECK(jk.at("p50_ns").get<std::uint64_t>() == k.p50_ns());
    CHECK(jk.at("p90_ns").get<std::uint64_t>() == k.p90_ns());
    CHECK(jk.at("p99_ns").get<std::uint64_t>() == k.p99_ns());
  }
  CHECK(j["keys"][1]["count"] == 2);
  CHECK(j["keys"][1]["total_ns"] == 6'000'000);
}

TEST_CASE("JSON strings are escaped", "[report]") {
  dflash::profile_snapshot s;
  s.keys.push_back({});
  s.keys[0].name = "we\"ird\\name\n";
  const auto j = nlohmann::json::parse(dflash::format_json(s));
  CHECK(j["keys"][0]["name"] == "we\"ird\\name\n");
}
