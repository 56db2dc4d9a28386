#include <catch2/catch.hpp>
#include <dflash/profile/periodic_reporter.hpp>
#include <dflash/profile.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using namespace dflash::literals;
using dflash::manual_clock;

namespace {
using keys = dflash::key_set<"forward", "pack">;
using fake_profiler = dflash::AccumulatingProfiler<keys, manual_clock>;
using fake_reporter = dflash::periodic_reporter<fake_profiler, manual_clock>;

struct capture {
  std::vector<std::string>* out;
  void operator()(std::string_view s) const { out->emplace_back(s); }
};

nlohmann::json key_of(const std::string& report, const char* name) {
  const auto j = nlohmann::json::parse(report);
  for (const auto& k : j["keys"])
    if (k["name"] == name) return k;
  return {};
}
}  // namespace

TEST_CASE("negative or NaN interval is rejected; 0 means off", "[reporter]") {
  fake_profiler prof;
  std::vector<std::string> out;
  CHECK_THROWS_MATCHES(fake_reporter(prof, -1s, capture{&out}), std::invalid_argument,
                       Catch::Matchers::Predicate<std::invalid_argument>([](const std::invalid_argument& e) { return std::string(e.what()).find("interval must be >= 0 seconds") != std::string::npos; }));
  CHECK_THROWS_AS(fake_reporter(prof, std::chrono::duration<double>(std::nan("")), capture{&out}),
                  std::invalid_argument);
  CHECK_THROWS_AS(fake_reporter(prof, std::chrono::duration<double>(std::numeric_limits<double>::infinity()),
                                capture{&out}),
                  std::invalid_argument);
  CHECK_THROWS_AS(fake_reporter(prof, 1s, fake_reporter::sink_type{}), std::invalid_argument);
  // Null reporters check their input too: the same flag fails the same way in every build.
  CHECK_THROWS_AS(dflash::periodic_reporter<dflash::NullProfiler>(dflash::NullProfiler{}, -1s, capture{&out}),
                  std::invalid_argument);

  manual_clock::set(manual_clock::time_point{});
  fake_reporter off(prof, 0s, capture{&out});
  CHECK_FALSE(off.enabled());
  off.start();  // no thread for an interval of 0
  manual_clock::advance(1h);
  CHECK_FALSE(off.tick());
  CHECK(off.reports() == 0);
  CHECK(out.empty());
}

TEST_CASE("reports every interval of the clock, clearing between reports", "[reporter]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler prof;
  std::vector<std::string> out;
  fake_reporter rep(prof, 10s, capture{&out}, {dflash::report_format::json, dflash::report_reset::clear});
  REQUIRE(rep.enabled());
  prof.add("forward"_key, 2ms);
  CHECK_FALSE(rep.tick());
  manual_clock::advance(9999ms);
  CHECK_FALSE(rep.tick());
  CHECK(out.empty());
  manual_clock::advance(1ms);  // t = 10 s
  CHECK(rep.tick());
  CHECK_FALSE(rep.tick());  // once per interval
  REQUIRE(out.size() == 1);
  auto j = nlohmann::json::parse(out[0]);
  CHECK(j["window_ns"] == 10'000'000'000ull);
  CHECK(key_of(out[0], "forward")["count"] == 1);
  CHECK(key_of(out[0], "forward")["total_ns"] == 2'000'000);
  CHECK(key_of(out[0], "pack")["count"] == 0);

  prof.add("forward"_key, 3ms);
  prof.add("pack"_key, 1ms);
  manual_clock::advance(10s);  // t = 20 s
  CHECK(rep.tick());
  REQUIRE(out.size() == 2);
  CHECK(nlohmann::json::parse(out[1])["window_ns"] == 10'000'000'000ull);
  CHECK(key_of(out[1], "forward")["count"] == 1);  // cleared: only the last interval
  CHECK(key_of(out[1], "forward")["total_ns"] == 3'000'000);
  CHECK(key_of(out[1], "pack")["total_ns"] == 1'000'000);
  CHECK(rep.reports() == 2);
}

TEST_CASE("keep mode reports running totals", "[reporter]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler prof;
  std::vector<std::string> out;
  fake_reporter rep(prof, 1s, capture{&out}, {dflash::report_format::json, dflash::report_reset::keep});
  prof.add("forward"_key, 2ms);
  manual_clock::advance(1s);
  REQUIRE(rep.tick());
  prof.add("forward"_key, 3ms);
  manual_clock::advance(1s);
  REQUIRE(rep.tick());
  REQUIRE(out.size() == 2);
  CHECK(key_of(out[1], "forward")["count"] == 2);
  CHECK(key_of(out[1], "forward")["total_ns"] == 5'000'000);
  CHECK(nlohmann::json::parse(out[1])["window_ns"] == 2'000'000'000ull);
}

TEST_CASE("a late tick reports once and reschedules from now", "[reporter]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler prof;
  std::vector<std::string> out;
  fake_reporter rep(prof, 10s, capture{&out});
  manual_clock::advance(35s);
  CHECK(rep.tick());
  CHECK_FALSE(rep.tick());  // no burst of catch-up reports
  manual_clock::advance(9s);
  CHECK_FALSE(rep.tick());
  manual_clock::advance(1s);  // 35 + 10
  CHECK(rep.tick());
  CHECK(out.size() == 2);
}

TEST_CASE("table output to a std::ostream names every key", "[reporter]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler prof;
  std::ostringstream os;
  fake_reporter rep(prof, 5s, os);
  prof.add("pack"_key, 4ms);
  manual_clock::advance(5s);
  REQUIRE(rep.tick());
  const std::string s = os.str();
  CHECK(s.rfind("profile over 5.000 s\n", 0) == 0);
  CHECK(s.find("forward") != std::string::npos);
  CHECK(s.find("pack ") != std::string::npos);
  rep.report_now();  // outside the schedule, e.g. a final summary
  CHECK(rep.reports() == 2);
}

TEST_CASE("NullProfiler reporter is an empty type with no thread", "[reporter]") {
  using null_reporter = dflash::periodic_reporter<dflash::NullProfiler>;
  STATIC_REQUIRE(std::is_empty_v<null_reporter>);
  STATIC_REQUIRE_FALSE(null_reporter::enabled());
  std::ostringstream os;
  null_reporter rep(dflash::NullProfiler{}, 1s, os);
  rep.start();
  CHECK_FALSE(rep.tick());
  rep.report_now();
  rep.stop();
  CHECK(os.str().empty());
}

TEST_CASE("background thread reports on a real clock until stopped", "[reporter]") {
  dflash::AccumulatingProfiler<keys> prof;
  std::vector<std::string> out;
  std::mutex m;
  dflash::periodic_reporter rep(prof, 2ms, [&](std::string_view s) {
    std::lock_guard lk(m);
    out.emplace_back(s);
  });
  rep.start();
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (rep.reports() < 2 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  rep.stop();
  const auto n = rep.reports();
  CHECK(n >= 2);
  std::this_thread::sleep_for(10ms);
  CHECK(rep.reports() == n);  // stopped: no more reports
  std::lock_guard lk(m);
  CHECK(out.size() == n);
}
