// format_job_table (pure formatting, no MPI runtime): every duration cell has
// the unit that shows it, as the single-process table does — a 20 us mean is
// "20.000 us", not "0.020" (or "0.000") in a millisecond column.
#include <catch2/catch.hpp>

#include <dflash/mpi/job_profile.hpp>

#include <string>

namespace {
dflash::key_stats stats(const char* name, std::uint64_t count, std::uint64_t each_ns) {
  dflash::key_stats k;
  k.name = name;
  k.count = count;
  k.total_ns = count * each_ns;
  k.min_ns = k.max_ns = each_ns;
  k.buckets.assign(dflash::histogram::bucket_count, 0);
  k.buckets[dflash::histogram::bucket_of(each_ns)] = count;
  return k;
}
}  // namespace

TEST_CASE("job table: each duration cell carries its own unit", "[mpi][report]") {
  dflash::mpi::job_profile j;
  for (int r = 0; r < 2; ++r) {
    dflash::profile_snapshot s;
    s.window_ns = 5'000'000'000;
    s.keys = {stats("fast", 10, 20'000), stats("slow", 10, 300'000'000), stats("never", 0, 1)};
    j.ranks.push_back(s);
    j.heard.push_back(true);
    j.errors.emplace_back();
  }
  const std::string t = dflash::mpi::format_job_table(j);
  INFO(t);
  const auto row = [&](const char* key) {
    const auto at = t.find(std::string("\n") + key + " ");
    REQUIRE(at != std::string::npos);
    return t.substr(at + 1, t.find('\n', at + 1) - at - 1);
  };
  const std::string fast = row("fast"), slow = row("slow");
  CHECK(fast.find("400.000 us") != std::string::npos);  // total: 2 ranks x 10 x 20 us
  CHECK(fast.find("20.000 us") != std::string::npos);   // mean, rank min/median/max, each rank
  CHECK(fast.find(" 0.0") == std::string::npos);  // no cell rounded to nothing in a coarse unit
  CHECK(slow.find("6.000 s") != std::string::npos);
  CHECK(slow.find("300.000 ms") != std::string::npos);
  CHECK(row("never").find(" - ") != std::string::npos);
}
