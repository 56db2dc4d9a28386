// dflash::bench (variants.hpp): statistics checked against values computed by
// hand (numpy's default quantile: linear interpolation), the rotation of the
// rounds, the grid, labels, every bad input an error naming it, the JSON's
// schema, and a workload of known relative cost: spins of 1x and 3x the work,
// whose verdict the runner must get right on a shared machine (8 of 9 rounds
// must agree; a factor of 3 is far outside this machine's noise).
#include <catch2/catch.hpp>
#include <dflash/bench/variants.hpp>
#include <dflash/profile.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/trace_profiler.hpp>
#include <nlohmann/json.hpp>

#include <atomic>
#include <cstdint>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace db = dflash::bench;
using Catch::Matchers::Contains;
using keys = dflash::key_set<"spin">;
using acc = dflash::AccumulatingProfiler<keys>;
using trace = dflash::TraceProfiler<keys>;

TEST_CASE("bench stats: quantiles, ratios and verdicts against hand-computed values", "[bench]") {
  const db::spread s = db::spread_of({4, 1, 3, 2});
  CHECK(s.median == Approx(2.5));
  CHECK(s.p25 == Approx(1.75));
  CHECK(s.p75 == Approx(3.25));
  CHECK(s.min == 1);
  CHECK(s.max == 4);
  const db::spread odd = db::spread_of({10, 30, 20, 50, 40});
  CHECK(odd.median == 30);
  CHECK(odd.p25 == 20);
  CHECK(odd.p75 == 40);
  CHECK(db::spread_of({7}).p75 == 7);
  CHECK_THROWS_WITH(db::spread_of({}), Contains("no values"));
  CHECK_THROWS_WITH(db::spread_of({1, std::numeric_limits<double>::infinity()}), Contains("not finite"));

  const auto r = db::ratios({2, 3, 8}, {1, 3, 4});
  CHECK(r == std::vector<double>{2, 1, 2});
  CHECK_THROWS_WITH(db::ratios({1, 2}, {1}), Contains("differ in rounds"));
  CHECK_THROWS_WITH(db::ratios({1}, {0}), Contains("not positive"));

  // A two-sided sign test at the 10 % level: P(>= k of n on one side | a fair coin) <= 0.1.
  CHECK(db::rounds_needed(3) == 4);  // never: 3 rounds cannot tell
  CHECK(db::rounds_needed(4) == 5);  // never: even 4 of 4 has 2 / 16 = 0.125
  CHECK(db::rounds_needed(5) == 5);  // 2 / 32 = 0.0625
  CHECK(db::rounds_needed(7) == 7);  // 6 of 7: 2 * 8 / 128 = 0.125
  CHECK(db::rounds_needed(9) == 8);  // 2 * 10 / 512 = 0.039; 7 of 9: 2 * 46 / 512 = 0.18
  CHECK(db::rounds_needed(12) == 10);  // 2 * 79 / 4096 = 0.039; 9 of 12: 2 * 299 / 4096 = 0.146
  CHECK(db::verdict_of(std::vector<double>{1.1, 1.2, 1.05, 1.3, 1.01}) == db::verdict::faster);
  CHECK(db::verdict_of(std::vector<double>{0.5, 0.9, 0.7, 0.8, 0.99}) == db::verdict::slower);
  CHECK(db::verdict_of(std::vector<double>{0.9, 1.2, 1.3, 1.1, 1.4}) == db::verdict::within_noise);  // one disagrees
  CHECK(db::verdict_of(std::vector<double>{0.5, 0.6, 0.7}) == db::verdict::within_noise);  // too few rounds to tell
  CHECK(db::verdict_of(std::vector<double>(9, 0.5)) == db::verdict::slower);
  std::vector<double> one_odd(9, 0.5);
  one_odd[3] = 14.0;  // one round the machine stalled the baseline: 8 of 9 still agree
  CHECK(db::verdict_of(one_odd) == db::verdict::slower);
  const db::round_votes tie = db::votes_of({1.0, 1.2, 0.8});  // a tie is no direction
  CHECK(tie.faster == 1);
  CHECK(tie.slower == 1);
}

TEST_CASE("bench rotation: every variant once per round, every position equally often, repeatable", "[bench]") {
  const auto o = db::rotation(4, 8, 42);
  REQUIRE(o.size() == 8);
  std::vector<std::vector<int>> at(4, std::vector<int>(4, 0));  // at[variant][position]
  for (const auto& round : o) {
    CHECK(std::set<std::size_t>(round.begin(), round.end()).size() == 4);
    for (std::size_t p = 0; p < 4; ++p) ++at[round[p]][p];
  }
  for (const auto& v : at)
    for (const int n : v) CHECK(n == 2);
  CHECK(db::rotation(4, 8, 42) == o);
  CHECK(db::rotation(5, 1, 1) != db::rotation(5, 1, 2));  // the seed orders the variants
  for (std::size_t k = 1; k < o.size(); ++k) CHECK(o[k][0] == o[k - 1][1]);  // rotated by one each round
}

TEST_CASE("bench grid: every combination, the first setting slowest; bad settings named", "[bench]") {
  db::grid g;
  g.add("depth", {2, 8, 60}).add("workers", {1, 2});
  const auto c = g.configs();
  REQUIRE(c.size() == 6);
  CHECK(c[0].label() == "depth=2 workers=1");
  CHECK(c[1].label() == "depth=2 workers=2");
  CHECK(c[5]["depth"] == 60);
  CHECK_THROWS_WITH(c[0]["threads"], Contains("no setting named 'threads'") && Contains("depth, workers"));
  CHECK(db::grid().configs().size() == 1);  // no settings: one configuration, with none
  CHECK_THROWS_WITH(db::grid().add("depth", {}), Contains("setting 'depth' has no value"));
  CHECK_THROWS_WITH(db::grid().add("d", {1}).add("d", {2}), Contains("'d' added twice"));
}

TEST_CASE("bench labels: a policy's own name, a composite's members, or the one given", "[bench]") {
  CHECK(db::label_of<dflash::NullProfiler>() == "NullProfiler");
  CHECK(db::label_of<acc>() == "AccumulatingProfiler");
  CHECK(db::label_of<dflash::Composite<acc, trace>>() == "AccumulatingProfiler+TraceProfiler");
  CHECK(db::label_of<db::named<"profiled", acc>>() == "profiled");
}

namespace {
// (Key types, not "spin"_key, and no requires-expression in the workload
// lambda: clang 14 crashes instantiating such a lambda for a Composite.)
using spin_key = dflash::key_t<"spin">;
// A profiler that counts must have counted this run's scopes only: the runner made it fresh.
template <class P>
void check_fresh(const P& prof, std::int64_t n) {
  if constexpr (std::is_same_v<P, acc>)
    if (prof.count(spin_key{}) != static_cast<std::uint64_t>(n)) throw std::logic_error("the profiler was not fresh");
}

// About `work` x 20 ms of work: long enough that a run outlasts the
// scheduler's slices on a shared machine, so each round compares like with like.
std::int64_t spin(std::int64_t work) {
  volatile std::uint64_t x = 1;
  for (std::int64_t i = 0; i < work * 20'000'000; ++i) x = x * 6364136223846793005ull + 1442695040888963407ull;
  return work;
}
}  // namespace

TEST_CASE("bench run: a workload of known relative cost gets its verdict right", "[bench]") {
  db::options o;
  o.rounds = 9;
  o.unit = "units";
  // Units are the configuration's own: the 3x variant does 3 units of work
  // but reports 1, so its rate is a third of the baseline's.
  const auto r = db::run(db::policies<dflash::NullProfiler>{}, db::grid().add("cost", {1, 3}),
                         [](const auto&, const db::config& c) { return spin(c["cost"]) / c["cost"]; }, o);
  REQUIRE(r.variants.size() == 2);
  CHECK(r.baseline == 0);
  CHECK(r.variants[0].verdict == db::verdict::baseline);
  const auto& slow = r.variants[1];
  INFO(r.table());
  CHECK(slow.name == "NullProfiler cost=3");
  CHECK(slow.verdict == db::verdict::slower);
  CHECK(slow.votes.slower >= db::rounds_needed(9));  // what "slower" means: 8 of 9 rounds or more
  CHECK(slow.units == std::vector<double>(9, 1.0));
  CHECK(r.table().find("slower by") != std::string::npos);
  const db::comparison back = r.compare("NullProfiler cost=1", "NullProfiler cost=3");  // any two, either way
  CHECK(back.verdict == db::verdict::faster);
  CHECK(back.votes.faster >= 8);
  CHECK(back.ratio.median == Approx(1 / slow.vs_baseline.median));
  CHECK_THROWS_WITH(r.compare("cost=1", "NullProfiler cost=3"), Contains("no variant named 'cost=1'"));
}

TEST_CASE("bench run: every policy, a fresh profiler per run, interleaved, with JSON that follows its schema",
          "[bench]") {
  std::atomic<int> runs{0};
  db::options o;
  o.rounds = 3;
  o.warmup = 2;
  o.unit = "steps";
  const auto r = db::run(db::policies<dflash::NullProfiler, acc, db::named<"both", dflash::Composite<acc, trace>>>{},
                         db::grid().add("n", {10, 20}),
                         [&](const auto& prof, const db::config& c) {
                           ++runs;
                           for (std::int64_t i = 0; i < c["n"]; ++i) auto t = prof.scope(spin_key{});
                           check_fresh(prof, c["n"]);
                           return c["n"];
                         },
                         o);
  CHECK(runs.load() == 6 * (3 + 2));
  REQUIRE(r.variants.size() == 6);
  const auto j = nlohmann::json::parse(r.json());
  CHECK(j["unit"] == "steps");
  CHECK(j["rounds"] == 3);
  CHECK(j["baseline"] == "NullProfiler n=10");
  REQUIRE(j["variants"].size() == 6);
  for (const auto& v : j["variants"]) {
    CHECK(v["rounds"].size() == 3);
    for (const char* k : {"rate", "wall_per_unit_s", "cpu_per_unit_s", "vs_baseline"})
      for (const char* q : {"median", "p25", "p75", "min", "max"}) CHECK(v[k][q].is_number());
    CHECK(v["config"]["n"].is_number_integer());
  }
  CHECK(j["variants"][5]["name"] == "both n=20");
  CHECK(j["variants"][5]["policy"] == "both");
}

TEST_CASE("bench run: bad input is an error that names it", "[bench]") {
  const auto ok = [](const auto&, const db::config&) { return 1; };
  db::options zero;
  zero.rounds = 0;
  CHECK_THROWS_WITH(db::run(db::policies<dflash::NullProfiler>{}, db::grid(), ok, zero),
                    Contains("rounds must be at least 1"));
  db::options unknown;
  unknown.baseline = "fast";
  CHECK_THROWS_WITH(db::run(db::policies<dflash::NullProfiler>{}, db::grid().add("d", {1, 2}), ok, unknown),
                    Contains("no variant named 'fast'") && Contains("'NullProfiler d=1', 'NullProfiler d=2'"));
  CHECK_THROWS_WITH(db::run(db::policies<dflash::NullProfiler, acc>{}, db::grid().add("d", {1, 2}),
                            [](const auto& p, const db::config& c) -> int {
                              if (std::is_same_v<std::decay_t<decltype(p)>, acc> && c["d"] == 2)
                                throw std::runtime_error("out of memory");
                              return 1;
                            }),
                    Contains("variant 'AccumulatingProfiler d=2' threw: out of memory"));
  CHECK_THROWS_WITH(db::run(db::policies<dflash::NullProfiler>{}, db::grid(),
                            [](const auto&, const db::config&) { return 0; }),
                    Contains("variant 'NullProfiler' did no work in its warm-up"));
  db::options no_warmup;
  no_warmup.warmup = 0;
  CHECK_THROWS_WITH(db::run(db::policies<dflash::NullProfiler>{}, db::grid(),
                            [](const auto&, const db::config&) { return -2.5; }, no_warmup),
                    Contains("did no work in round 1"));
}
