#include <catch2/catch.hpp>
#include <dflash/profile.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <limits>
#include <ratio>
#include <string>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace dflash::literals;
using namespace std::chrono_literals;
using dflash::manual_clock;

using keys = dflash::key_set<"forward", "pack", "idle">;
using fake_profiler = dflash::AccumulatingProfiler<keys, manual_clock>;

TEST_CASE("exact count, total, min, max and mean from a deterministic clock", "[accumulating]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler p;
  for (auto d : {5ms, 1ms, 3ms}) {
    auto t = p.scope("forward"_key);
    manual_clock::advance(d);
  }
  auto tok = p.begin("pack"_key);
  manual_clock::advance(250us);
  p.end("pack"_key, tok);
  p.add("pack"_key, 750us);

  const auto s = p.snapshot();
  REQUIRE(s.window_ns == 9'250'000);  // 5 + 1 + 3 ms of forward, 250 us of pack
  REQUIRE(s.keys.size() == 3);
  const auto& f = s.keys[0];
  CHECK(f.name == "forward");
  CHECK(f.count == 3);
  CHECK(f.total_ns == 9'000'000);
  CHECK(f.min_ns == 1'000'000);
  CHECK(f.max_ns == 5'000'000);
  CHECK(f.mean_ns() == Approx(3'000'000.0));
  const auto& pk = *s.find("pack");
  CHECK(pk.count == 2);
  CHECK(pk.total_ns == 1'000'000);
  CHECK(pk.min_ns == 250'000);
  CHECK(pk.max_ns == 750'000);
  const auto& idle = *s.find("idle");
  CHECK(idle.count == 0);
  CHECK(idle.min_ns == 0);
  CHECK(idle.max_ns == 0);
}

TEST_CASE("percentiles come from the histogram within its 1/16 resolution", "[accumulating]") {
  fake_profiler p;
  for (int i = 1; i <= 1000; ++i) p.add("forward"_key, std::chrono::microseconds(i));
  const auto s = p.snapshot();
  const auto& f = s.keys[0];
  auto near = [](std::uint64_t got, double want) {
    return std::abs(static_cast<double>(got) - want) <= want / 16.0;
  };
  CHECK(near(f.p50_ns(), 500'000.0));
  CHECK(near(f.p90_ns(), 900'000.0));
  CHECK(near(f.p99_ns(), 990'000.0));
  CHECK(f.percentile_ns(0.0) == f.min_ns);
  CHECK(f.percentile_ns(1.0) <= f.max_ns);
  CHECK(f.p50_ns() <= f.p90_ns());
  CHECK(f.p90_ns() <= f.p99_ns());
}

TEST_CASE("clear() empties every key and restarts the window", "[accumulating]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler p;
  p.add("forward"_key, 2ms);
  manual_clock::advance(10ms);
  p.clear();
  auto s = p.snapshot();
  CHECK(s.window_ns == 0);
  for (const auto& k : s.keys) {
    CHECK(k.count == 0);
    CHECK(k.total_ns == 0);
  }
  p.add("forward"_key, 1ms);  // still records after clear, min re-armed
  s = p.snapshot();
  CHECK(s.keys[0].count == 1);
  CHECK(s.keys[0].min_ns == 1'000'000);
}

TEST_CASE("take() returns the window and resets it", "[accumulating]") {
  manual_clock::set(manual_clock::time_point{});
  fake_profiler p;
  p.add("idle"_key, 4ms);
  manual_clock::advance(1s);
  const auto first = p.take();
  CHECK(first.window_ns == 1'000'000'000);
  CHECK(first.find("idle")->count == 1);
  const auto second = p.take();
  CHECK(second.window_ns == 0);
  CHECK(second.find("idle")->count == 0);
}

TEST_CASE("a negative duration is an error, not a silent clamp", "[accumulating]") {
  fake_profiler p;
  REQUIRE_THROWS_WITH(p.add("forward"_key, -1ms), Catch::Contains("negative duration") && Catch::Contains("forward"));
  REQUIRE(p.count("forward"_key) == 0);
}

TEST_CASE("the TSC clock measures real time within reason", "[accumulating]") {
  const auto t0 = dflash::tsc_clock::now();
  const auto s0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(20ms);
  const auto tsc = dflash::tsc_clock::now() - t0;
  const auto steady = std::chrono::steady_clock::now() - s0;
  const double ratio = std::chrono::duration<double>(tsc) / std::chrono::duration<double>(steady);
  CHECK(ratio == Approx(1.0).epsilon(0.05));
}

TEST_CASE("a TSC scope records the range's length from raw ticks", "[accumulating]") {
  using tsc_profiler = dflash::AccumulatingProfiler<keys, dflash::tsc_clock>;
  tsc_profiler p;
#if DFLASH_HAS_TSC
  static_assert(tsc_profiler::scope_reads_ticks(), "a TickClock scope of AccumulatingProfiler converts once");
  static_assert(!dflash::AccumulatingProfiler<keys>::scope_reads_ticks());  // steady_clock: time points
#endif
  const auto s0 = std::chrono::steady_clock::now();
  {
    auto s = p.scope("forward"_key);
    std::this_thread::sleep_for(20ms);
  }
  const auto steady = std::chrono::steady_clock::now() - s0;
  const auto snap = p.snapshot();
  const auto* f = snap.find("forward");
  REQUIRE(f != nullptr);
  REQUIRE(f->count == 1);
  // Inside the steady range, and not much shorter than the sleep.
  CHECK(static_cast<double>(f->total_ns) <= 1.05 * static_cast<double>(std::chrono::nanoseconds(steady).count()));
  CHECK(f->total_ns >= 19'000'000);
}

#if DFLASH_HAS_TSC
TEST_CASE("TSC ticks convert like time points; a negative difference is 0", "[accumulating]") {
  using tsc = dflash::tsc_clock;
  const auto s0 = std::chrono::steady_clock::now();
  const std::uint64_t k0 = tsc::ticks();
  const auto t0 = tsc::now();
  std::this_thread::sleep_for(5ms);
  const auto t1 = tsc::now();
  const std::uint64_t k1 = tsc::ticks();
  const auto steady = std::chrono::nanoseconds(std::chrono::steady_clock::now() - s0).count();
  const auto by_points = static_cast<std::uint64_t>((t1 - t0).count());
  const std::uint64_t by_ticks = tsc::ticks_to_ns(static_cast<std::int64_t>(k1 - k0));
  CHECK(by_ticks + 1 >= by_points);  // the tick range encloses the time-point range (each rounds down)
  CHECK(static_cast<double>(by_ticks) <= 1.05 * static_cast<double>(steady));
  CHECK(tsc::ticks_to_ns(0) == 0);
  CHECK(tsc::ticks_to_ns(-1) == 0);
  CHECK(tsc::ticks_to_ns(std::numeric_limits<std::int64_t>::min()) == 0);
}
#endif

namespace {
template <class Profiler>
void hammer(Profiler& p, int threads, int per_thread) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&p, per_thread, t] {
      for (int i = 0; i < per_thread; ++i) p.add("forward"_key, std::chrono::nanoseconds(1 + (i + t) % 1000));
    });
  for (auto& th : pool) th.join();
}
}  // namespace

TEST_CASE("8 threads x 100000 adds lose no update", "[accumulating][stress]") {
  dflash::AccumulatingProfiler<keys> p;
  hammer(p, 8, 100'000);
  const auto s = p.snapshot();
  const auto& f = s.keys[0];
  REQUIRE(f.count == 800'000);
  std::uint64_t want_total = 0;
  for (int t = 0; t < 8; ++t)
    for (int i = 0; i < 100'000; ++i) want_total += 1 + (i + t) % 1000;
  REQUIRE(f.total_ns == want_total);
  REQUIRE(f.min_ns == 1);
  REQUIRE(f.max_ns == 1000);
  std::uint64_t in_buckets = 0;
  for (auto b : f.buckets) in_buckets += b;
  REQUIRE(in_buckets == 800'000);
}

TEST_CASE("take() while 4 threads record: every add lands in exactly one window", "[accumulating][stress]") {
  dflash::AccumulatingProfiler<keys> p;
  std::atomic<bool> done{false};
  std::uint64_t taken = 0;
  std::thread reporter([&] {
    while (!done.load()) taken += p.take().keys[0].count;
  });
  hammer(p, 4, 100'000);
  done = true;
  reporter.join();
  taken += p.take().keys[0].count;
  REQUIRE(taken == 400'000);
}

// take() racing adds: if each field were reset with its own exchange, an add
// could put its count in one report and its total/min/max in the next (a
// report like "count 9313, min UINT64_MAX, max 0, total 0"). Every report
// must be self-consistent; with adds of one fixed duration d:
// total = d * count, and min = max = d whenever count > 0. Runs under TSan too.
namespace {
template <class Profiler>
void take_racing_adds(int reports_wanted) {
  constexpr std::uint64_t d = 777;
  constexpr int writers = 3;
  Profiler p;
  std::atomic<bool> stop{false};
  std::atomic<std::uint64_t> added{0};
  std::uint64_t taken = 0, bad = 0;
  std::string first_bad;
  auto check = [&](const dflash::profile_snapshot& s) {
    const auto& k = s.keys[0];
    std::uint64_t in_buckets = 0;
    for (auto b : k.buckets) in_buckets += b;
    const bool ok = k.total_ns == d * k.count && in_buckets == k.count &&
                    (k.count == 0 ? k.min_ns == 0 && k.max_ns == 0 : k.min_ns == d && k.max_ns == d);
    if (!ok && bad++ == 0)
      first_bad = "count " + std::to_string(k.count) + " total " + std::to_string(k.total_ns) + " min " +
                  std::to_string(k.min_ns) + " max " + std::to_string(k.max_ns);
    taken += k.count;
  };
  std::vector<std::thread> pool;
  for (int t = 0; t < writers; ++t)
    pool.emplace_back([&] {
      std::uint64_t n = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        p.add("forward"_key, std::chrono::nanoseconds(d));
        ++n;
      }
      added += n;
    });
  for (int r = 0; r < reports_wanted; ++r) check(p.take());  // adds race every take()
  stop = true;
  for (auto& th : pool) th.join();
  check(p.take());
  INFO("first inconsistent report: " << first_bad);
  CHECK(bad == 0);
  CHECK(taken == added.load());
}
}  // namespace

TEST_CASE("take() racing adds: every report is self-consistent, none lost", "[accumulating]") {
  take_racing_adds<dflash::AccumulatingProfiler<keys>>(2000);
}

TEST_CASE("take() racing adds with more threads than shards (overflow shard)", "[accumulating]") {
  take_racing_adds<dflash::AccumulatingProfiler<keys, std::chrono::steady_clock, 1>>(500);
}

// The range check comes before any conversion to int64 ns: converted first,
// years(300) would read as a negative duration, years(585) as ~163 days, and
// NaN / inf as INT64_MIN.
TEST_CASE("add(): out-of-range and non-finite durations are rejected before converting", "[accumulating]") {
  using years = std::chrono::duration<std::int64_t, std::ratio<31556952>>;
  using dsec = std::chrono::duration<double>;
  fake_profiler p;
  CHECK_THROWS_WITH(p.add("forward"_key, years(300)),
                    Catch::Contains("too large") && Catch::Contains("forward") && !Catch::Contains("negative"));
  CHECK_THROWS_WITH(p.add("forward"_key, years(585)), Catch::Contains("too large"));
  CHECK_THROWS_WITH(p.add("forward"_key, std::chrono::hours::max()), Catch::Contains("too large"));
  CHECK_THROWS_WITH(p.add("forward"_key, dsec(std::numeric_limits<double>::quiet_NaN())),
                    Catch::Contains("NaN") && Catch::Contains("forward"));
  CHECK_THROWS_WITH(p.add("forward"_key, dsec(std::numeric_limits<double>::infinity())),
                    Catch::Contains("infinite"));
  CHECK_THROWS_WITH(p.add("forward"_key, dsec(-std::numeric_limits<double>::infinity())),
                    Catch::Contains("infinite"));
  CHECK_THROWS_WITH(p.add("forward"_key, years(-300)), Catch::Contains("negative duration"));
  CHECK(p.count("forward"_key) == 0);
  // The edges that fit are recorded exactly.
  p.add("forward"_key, years(292));
  p.add("forward"_key, dsec(1.5e-9));
  const auto s = p.snapshot();
  CHECK(s.keys[0].count == 2);
  CHECK(s.keys[0].max_ns == 292ull * 31556952ull * 1'000'000'000ull);
  CHECK(s.keys[0].min_ns == 1);
}

// Records are staged and folded into total / min / max / histogram 16 at a
// time, and readers fold the staged rest the same way. Known durations on
// both sides of each batch boundary, with the smallest and largest value
// rotated through every position (folded batch or staged rest), must read
// back exactly: count, total, min, max and every histogram bucket.
TEST_CASE("batch fold: exact count, total, min, max and buckets for 1..70 known durations at every rotation",
          "[accumulating]") {
  std::vector<std::uint64_t> base;
  std::uint64_t x = 88172645463325252ull;  // xorshift: fixed, so the test is the same each run
  for (int i = 0; i < 70; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    base.push_back(10 + x % 5'000'000);  // 10 ns .. 5 ms
  }
  base[3] = 1;           // the unique minimum
  base[11] = 9'000'000;  // the unique maximum
  for (const std::size_t n : {1u, 15u, 16u, 17u, 31u, 32u, 33u, 48u, 70u}) {
    for (std::size_t rot = 0; rot < n; rot += (n > 20 ? 3 : 1)) {
      CAPTURE(n, rot);
      std::vector<std::uint64_t> v(base.begin(), base.begin() + static_cast<std::ptrdiff_t>(n));
      std::rotate(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(rot), v.end());
      fake_profiler p;
      std::vector<std::uint64_t> want(dflash::histogram::bucket_count, 0);
      std::uint64_t total = 0, lo = UINT64_MAX, hi = 0;
      for (std::uint64_t d : v) {
        p.add("pack"_key, std::chrono::nanoseconds(d));
        ++want[dflash::histogram::bucket_of(d)];
        total += d;
        lo = std::min(lo, d);
        hi = std::max(hi, d);
      }
      for (int read = 0; read < 2; ++read) {  // reading must not change what a later read sees
        const auto s = p.snapshot();
        const auto& k = *s.find("pack");
        REQUIRE(k.count == n);
        CHECK(k.total_ns == total);
        CHECK(k.min_ns == lo);
        CHECK(k.max_ns == hi);
        REQUIRE(k.buckets.size() == want.size());
        CHECK(k.buckets == want);
      }
    }
  }
}
