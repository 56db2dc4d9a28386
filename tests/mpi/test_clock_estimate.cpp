// The NTP-style clock offset estimate (clock_estimate.hpp) and how the job
// table reports it (pure: no MPI runtime).
#include <catch2/catch.hpp>

#include <dflash/mpi/clock_estimate.hpp>
#include <dflash/mpi/job_profile.hpp>

#include <cstdint>
#include <string>
#include <vector>

using dflash::mpi::clock_round;
using dflash::mpi::estimate_clock_offset;

namespace {
// A round trip against a true offset `off` (this rank's clock minus rank 0's):
// sent at real time t, `out` ns on the way there, rank 0 busy `hold` ns,
// `back` ns on the way back; t0 and t3 read on this rank's clock.
clock_round trip(std::int64_t off, std::int64_t t, std::int64_t out, std::int64_t hold, std::int64_t back) {
  return {t + off, t + out, t + out + hold, t + out + hold + back + off};
}
constexpr std::int64_t limit = 1'000'000;
}  // namespace

TEST_CASE("clock estimate: the offset lies within the bound, whatever the asymmetry", "[mpi][clock]") {
  const std::int64_t off = 40'000'000'123;
  const std::vector<clock_round> r = {trip(off, 1000, 9000, 500, 1000), trip(off, 50'000, 2000, 100, 7000),
                                      trip(off, 90'000, 3000, 300, 3000)};
  const auto e = estimate_clock_offset(r, limit);
  CHECK(e.ok);
  CHECK(e.why.empty());
  CHECK(e.offset_ns - off <= e.error_ns);
  CHECK(off - e.offset_ns <= e.error_ns);
  // the common bound of the rounds is no wider than the best round's (rtt 6000 -> ±3000)
  CHECK(e.error_ns <= 3000);
}

TEST_CASE("clock estimate: a negative offset (this rank behind rank 0)", "[mpi][clock]") {
  const std::int64_t off = -25'000'000'000;
  const std::vector<clock_round> r = {trip(off, 0, 4000, 0, 4000), trip(off, 20'000, 1000, 0, 1000)};
  const auto e = estimate_clock_offset(r, limit);
  CHECK(e.ok);
  CHECK(e.offset_ns == off);
  CHECK(e.error_ns <= 1000);
}

TEST_CASE("clock estimate: a clock read backwards in every round fails, saying so", "[mpi][clock]") {
  std::vector<clock_round> r = {{100, 0, 10, 50}, {200, 0, 10, 150}};  // t3 < t0
  const auto e = estimate_clock_offset(r, limit);
  CHECK_FALSE(e.ok);
  CHECK(e.why == "a clock read backwards in every round trip (2 round trips)");
}

TEST_CASE("clock estimate: one backwards round among good ones still fails (the clock is not trustworthy)",
          "[mpi][clock]") {
  std::vector<clock_round> r = {trip(500, 0, 1000, 0, 1000), {100, 0, 10, 50}};
  const auto e = estimate_clock_offset(r, limit);
  CHECK_FALSE(e.ok);
  CHECK(e.offset_ns == 500);  // the best guess is kept
  CHECK(e.why == "a clock read backwards in 1 of the round trips (2 round trips)");
}

TEST_CASE("clock estimate: rounds that contradict each other (a clock stepped) fail", "[mpi][clock]") {
  // the offset steps by 1 ms between the rounds, far more than their ±1 us bounds
  const std::vector<clock_round> r = {trip(0, 0, 1000, 0, 1000), trip(1'000'000, 10'000, 1000, 0, 1000)};
  const auto e = estimate_clock_offset(r, limit);
  CHECK_FALSE(e.ok);
  CHECK(e.why.find("contradict each other") != std::string::npos);
}

TEST_CASE("clock estimate: a bound wider than the limit fails, naming both", "[mpi][clock]") {
  const std::vector<clock_round> r = {trip(7, 0, 3'000'000, 0, 3'000'000)};
  const auto e = estimate_clock_offset(r, limit);
  CHECK_FALSE(e.ok);
  CHECK(e.why == "the round trips were too slow: the bound ±3000.0 us is over the limit ±1000.0 us");
}

TEST_CASE("clock estimate: no rounds is a failure, not an offset of 0 reported as exact", "[mpi][clock]") {
  const auto e = estimate_clock_offset({}, limit);
  CHECK_FALSE(e.ok);
  CHECK(e.why == "no round trip was made");
}

namespace {
dflash::key_stats row(const char* name, std::uint64_t count) {
  dflash::key_stats k;
  k.name = name;
  k.count = count;
  k.total_ns = count * 1000;
  k.min_ns = k.max_ns = count ? 1000 : 0;
  k.buckets.assign(dflash::histogram::bucket_count, 0);
  if (count) k.buckets[dflash::histogram::bucket_of(1000)] = count;
  return k;
}
dflash::mpi::job_profile two_ranks(bool rank1_ok) {
  dflash::mpi::job_profile j;
  for (int r = 0; r < 2; ++r) {
    dflash::profile_snapshot s;
    s.window_ns = 1'000'000'000;
    s.keys = {row("sink.work", 5), row("sink.age", 5), row("sink.age_clock_backwards", 0), row("sink.e2e", 5)};
    j.ranks.push_back(s);
    j.heard.push_back(true);
    j.errors.emplace_back();
  }
  j.clocks.resize(2);
  j.clocks[1].offset_ns = 40'000'012'300;
  j.clocks[1].error_ns = 4'500;
  j.clocks[1].ok = rank1_ok;
  if (!rank1_ok) j.clocks[1].why = "a clock read backwards in every round trip (16 round trips)";
  return j;
}
}  // namespace

TEST_CASE("job table: each rank's clock offset to rank 0 with its bound", "[mpi][clock][report]") {
  const auto j = two_ranks(true);
  const std::string t = dflash::mpi::format_job_table(j);
  INFO(t);
  CHECK(t.find("rank 1: clock offset to rank 0: +40000012.3 us ± 4.5 us\n") != std::string::npos);
  CHECK(t.find("\nsink.age ") != std::string::npos);  // aligned clocks: the ages are not marked
  CHECK(t.find('~') == std::string::npos);
  const std::string js = dflash::mpi::format_job_json(j);
  CHECK(js.find("\"clocks\":[{\"rank\":0,\"offset_ns\":0,\"error_ns\":0,\"ok\":true,\"why\":\"\"},"
                "{\"rank\":1,\"offset_ns\":40000012300,\"error_ns\":4500,\"ok\":true,\"why\":\"\"}]") != std::string::npos);
  CHECK(js.find("estimated") == std::string::npos);
}

TEST_CASE("job table: a failed offset estimate says why and marks the age rows as estimates", "[mpi][clock][report]") {
  const auto j = two_ranks(false);
  const std::string t = dflash::mpi::format_job_table(j);
  INFO(t);
  CHECK(t.find("rank 1: clock offset to rank 0 could not be estimated: a clock read backwards in every round trip "
               "(16 round trips) (best guess +40000012.3 us ± 4.5 us)\n") != std::string::npos);
  CHECK(t.find("\nsink.age~ ") != std::string::npos);
  CHECK(t.find("\nsink.e2e~ ") != std::string::npos);
  CHECK(t.find("\nsink.work ") != std::string::npos);
  CHECK(t.find("\nsink.age_clock_backwards ") != std::string::npos);  // a count of items, not an age
  CHECK(t.find("~ estimated: a clock offset could not be estimated") != std::string::npos);
  const std::string js = dflash::mpi::format_job_json(j);
  CHECK(js.find("{\"name\":\"sink.age\",\"rank_min_mean_ns\":1000.000,\"rank_median_mean_ns\":1000.000,"
                "\"rank_max_mean_ns\":1000.000,\"slowest_rank\":0,\"estimated\":true,") != std::string::npos);
  CHECK(js.find("{\"name\":\"sink.work\",\"rank_min_mean_ns\":1000.000,\"rank_median_mean_ns\":1000.000,"
                "\"rank_max_mean_ns\":1000.000,\"slowest_rank\":0,\"per_rank\"") != std::string::npos);
  CHECK(js.find("\"ok\":false,\"why\":\"a clock read backwards") != std::string::npos);
}
