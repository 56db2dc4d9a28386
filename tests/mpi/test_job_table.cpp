// format_job_table (pure formatting, no MPI runtime): every duration cell has
// the unit that shows it, as the single-process table does — a 20 us mean is
// "20.000 us", not "0.020" (or "0.000") in a millisecond column.
#include <catch2/catch.hpp>

#include <dflash/mpi/job_bottleneck.hpp>
#include <dflash/mpi/job_profile.hpp>

#include <nlohmann/json.hpp>

#include <array>
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

namespace {
using names = std::array<const char*, 3>;
// a -q-> b -r-> c over one second; stage `slow` is busy 90 % (the others 10 %).
dflash::profile_snapshot one_busy_stage(names st, std::size_t slow) {
  dflash::profile_snapshot s;
  s.window_ns = 1'000'000'000;
  for (std::size_t i = 0; i < st.size(); ++i) {
    s.keys.push_back(stats((std::string(st[i]) + ".work").c_str(), 100, i == slow ? 9'000'000 : 1'000'000));
    s.keys.push_back(stats((std::string(st[i]) + ".wait").c_str(), 100, 1'000'000));
  }
  s.keys.push_back(stats("q.push_wait", 100, 0));
  s.keys.push_back(stats("r.push_wait", 100, 0));
  return s;
}
dflash::analysis::pipeline_layout three(names st) {
  dflash::analysis::pipeline_layout l;
  l.stages = {{st[0], 1}, {st[1], 1}, {st[2], 1}};
  l.links = {{"q", dflash::analysis::model_kind::queue, 8}, {"r", dflash::analysis::model_kind::queue, 8}};
  return l;
}
}  // namespace

TEST_CASE("job bottlenecks: each rank judged with its own pipeline's layout; a silent rank says so",
          "[mpi][report]") {
  dflash::mpi::job_profile j;
  // rank 0 runs one pipeline type (busy in its middle stage), ranks 1 and 2 another
  const names producer{"source", "forward", "send"}, consumer{"receive", "unpack", "drafter"};
  j.ranks = {one_busy_stage(producer, 1), one_busy_stage(consumer, 2), {}};
  j.heard = {true, true, false};
  j.errors.resize(3);
  const auto layout_of = [&](int r) { return r == 0 ? three(producer) : three(consumer); };
  const std::string t = dflash::mpi::format_job_bottlenecks(j, layout_of);
  INFO(t);
  const auto r0 = t.find("r0: bottleneck"), r1 = t.find("r1: bottleneck"), r2 = t.find("r2: bottleneck");
  REQUIRE(r0 != std::string::npos);
  REQUIRE(r1 != std::string::npos);
  REQUIRE(r2 != std::string::npos);
  CHECK(t.find("limiting stage: forward busy 90%", r0) < r1);
  CHECK(t.find("limiting stage: drafter busy 90%", r1) < r2);
  CHECK(t.find("not enough data — no profile arrived from this rank", r2) != std::string::npos);
  const std::string js = dflash::mpi::format_job_bottlenecks(j, layout_of, dflash::report_format::json);
  const auto doc = nlohmann::json::parse(js);
  REQUIRE(doc["ranks"].size() == 3);
  CHECK(doc["ranks"][0]["bottleneck"]["limiting"] == "forward");
  CHECK(doc["ranks"][1]["bottleneck"]["limiting"] == "drafter");
  CHECK(doc["ranks"][2]["bottleneck"]["ok"] == false);
}
