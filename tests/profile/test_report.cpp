#include <catch2/catch.hpp>
#include <dflash/profile.hpp>
#include <nlohmann/json.hpp>

#include <mutex>
#include <sstream>
#include <cstdint>
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

TEST_CASE("summary() is a table: header, one row per recorded key in key_set order", "[report]") {
  const std::string t = filled().summary();
  std::istringstream in(t);
  std::string title, header, r1, r2, foot1, foot2, extra;
  std::getline(in, title);
  std::getline(in, header);
  std::getline(in, r1);
  std::getline(in, r2);
  std::getline(in, foot1);
  std::getline(in, foot2);
  CHECK(title == "profile over 0.010 s");
  CHECK(header.find("stage") == 0);
  for (const char* col : {"count", "total", "mean", "p50*", "p90*", "p99*", "max", "% wall"})
    CHECK(header.find(col) != std::string::npos);
  CHECK(r1.rfind("queue_wait", 0) == 0);
  CHECK(r2.rfind("forward", 0) == 0);
  // forward: 2 calls, 6 ms total = 0.006 s, mean 3 ms, max 4 ms, 60 % of a 10 ms window.
  std::istringstream row(r2.substr(std::string("forward").size()));
  std::string count, total, total_u, mean, mean_u, p50, p50_u, p90, p90_u, p99, p99_u, max, max_u, share;
  row >> count >> total >> total_u >> mean >> mean_u >> p50 >> p50_u >> p90 >> p90_u >> p99 >> p99_u >> max >> max_u >> share;
  CHECK(count == "2");
  CHECK(total + " " + total_u == "6.000 ms");
  CHECK(mean + " " + mean_u == "3.000 ms");
  CHECK(max + " " + max_u == "4.000 ms");
  CHECK(share == "60.0");
  CHECK(r1.find("500.000 us") != std::string::npos);  // queue_wait's 500 us, in us
  // Percentiles say they have bucket resolution; a key never
  // recorded (drafter_step) is hidden and the footer says so.
  CHECK(foot1.find("* p50/p90/p99 have histogram-bucket resolution") == 0);
  CHECK(foot2.find("1 key never recorded in this window, hidden (drafter_step)") == 0);
  CHECK(t.find("drafter_step ") == std::string::npos);
  CHECK(t.find("% wall = ") == std::string::npos);  // no share over 100 %: no such footer
  CHECK_FALSE(std::getline(in, extra));
}

TEST_CASE("table: show_unrecorded lists never-recorded keys with dashes", "[report]") {
  dflash::report_options o;
  o.show_unrecorded = true;
  const std::string t = filled().summary(o);
  const auto at = t.find("\ndrafter_step ");
  REQUIRE(at != std::string::npos);
  const std::string row = t.substr(at + 1, t.find('\n', at + 1) - at - 1);
  CHECK(row.find(" 0 ") != std::string::npos);
  CHECK(row.find(" - ") != std::string::npos);
  CHECK(t.find("hidden") == std::string::npos);
}

TEST_CASE("table: a program words the hidden-keys footer in its own terms", "[report]") {
  dflash::report_options o;
  o.unrecorded_hint = "run with --all-keys to list them";
  const std::string t = filled().summary(o);
  CHECK(t.find("1 key never recorded in this window, hidden (drafter_step); run with --all-keys to list them\n") !=
        std::string::npos);
  CHECK(t.find("report_options::") == std::string::npos);
}

namespace {
// A 1 ms window with one key recorded `count` times, each `each_ns` long.
dflash::profile_snapshot one_key(const char* name, std::uint64_t count, std::uint64_t each_ns) {
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000;
  s.keys.resize(1);
  auto& k = s.keys[0];
  k.name = name;
  k.count = count;
  k.total_ns = count * each_ns;
  k.min_ns = k.max_ns = each_ns;
  k.buckets[dflash::histogram::bucket_of(each_ns)] = count;
  return s;
}
}  // namespace

TEST_CASE("table: sub-microsecond values keep a unit that shows them", "[report]") {
  const std::string t = dflash::format_table(one_key("tiny", 4, 250));
  CHECK(t.find("250 ns") != std::string::npos);
  CHECK(t.find("0.000") == std::string::npos);
}

TEST_CASE("table: a share over 100 % of wall time is explained", "[report]") {
  // two threads, 0.9 ms each, in a 1 ms window
  const std::string t = dflash::format_table(one_key("workers", 2, 900'000));
  CHECK(t.find(" 180.0\n") != std::string::npos);
  CHECK(t.find("% wall = total / window, summed over threads") != std::string::npos);
}

TEST_CASE("table: an age or end-to-end row has no share of wall time", "[report]") {
  // 60 items, each 1 ms old, in a 1 ms window: 6000 % would read as a bug
  for (const char* name : {"drafter.age", "drafter.e2e", "target.age_gpu_end", "post.age_clock_backwards"}) {
    INFO(name);
    const std::string t = dflash::format_table(one_key(name, 60, 1'000'000));
    CHECK(t.find("6000.0") == std::string::npos);
    CHECK(t.find("% wall = total / window") == std::string::npos);  // not counted as a share over 100 %
    CHECK(t.find("% wall is left empty for .age / .e2e rows") != std::string::npos);
  }
  const std::string busy = dflash::format_table(one_key("drafter.work", 60, 1'000'000));
  CHECK(busy.find("6000.0") != std::string::npos);  // a thread-time row keeps its share
  CHECK(busy.find("left empty") == std::string::npos);
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

// A row is never cut at a fixed-size buffer (a key name over ~165 characters
// would lose the rest of its row and its newline).
TEST_CASE("table rows with very long key names stay whole", "[report]") {
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000;
  s.keys.resize(2);
  s.keys[0].name = std::string(300, 'k');
  s.keys[1].name = "short";
  for (auto& k : s.keys) {
    k.count = 1;
    k.total_ns = k.min_ns = k.max_ns = 1000;
    k.buckets[dflash::histogram::bucket_of(1000)] = 1;
  }
  const std::string t = dflash::format_table(s);
  std::istringstream in(t);
  std::string line;
  int rows = 0;
  while (std::getline(in, line)) {
    if (line.rfind(std::string(300, 'k'), 0) == 0) {
      ++rows;
      CHECK(line.size() > 300);
      CHECK(line.substr(line.size() - 4) == " 0.1");  // the row runs to its last column (% wall)
    }
    if (line.rfind("short", 0) == 0) ++rows;
  }
  CHECK(rows == 2);
}

// Bytes that are not UTF-8 would make a JSON document invalid: they become
// U+FFFD; valid UTF-8 passes through.
TEST_CASE("JSON stays valid with invalid UTF-8 in names", "[report]") {
  dflash::profile_snapshot s;
  s.keys.resize(4);
  s.keys[0].name = "bad\xff\xfe end";
  s.keys[1].name = "cut \xe2\x82";            // truncated 3-byte sequence
  s.keys[2].name = "overlong \xc0\xaf ok";    // overlong '/'
  s.keys[3].name = "fine \xc2\xb5s \xe2\x82\xac";  // µs €
  const std::string out = dflash::format_json(s);
  nlohmann::json j;
  REQUIRE_NOTHROW(j = nlohmann::json::parse(out));
  CHECK(j["keys"][0]["name"] == "bad\xef\xbf\xbd\xef\xbf\xbd end");
  CHECK(j["keys"][1]["name"] == "cut \xef\xbf\xbd\xef\xbf\xbd");  // one U+FFFD per bad byte
  CHECK(j["keys"][2]["name"] == "overlong \xef\xbf\xbd\xef\xbf\xbd ok");
  CHECK(j["keys"][3]["name"] == "fine \xc2\xb5s \xe2\x82\xac");
}
