// dflash::device_queue_link on the asynchronous host twin: producer calls push
// a number of rows only their enqueued work knows, consumers pop batches of
// their own size across calls, and the host learns counts only from events it
// polls. Work runs later on the streams' threads, so a missing wait or a
// capacity returned too early is a wrong result here and a data race under TSan.
//
// The [stress] family draws scenarios from (seed, index):
//   DFLASH_STRESS_SEED=<n>     seed (default: from the clock; printed first)
//   DFLASH_STRESS_INDEX=<i>    replay one scenario of that seed only
//   DFLASH_STRESS_SECONDS=<s>  time budget for new scenarios (default 3)
#include <catch2/catch.hpp>
#include <dflash/analysis.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>
#include <dflash/profile.hpp>

#include "numbers_source.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
using dflash::NullProfiler;

namespace {

struct row {
  int item;  // the producer call's input
  int j;     // the row's index within that call
};
using rows = dflash::device_rows<row, B>;

// What a scenario draws (the deterministic cases fix one).
struct plan {
  std::uint64_t seed = 1;
  int bound = 4;               // MaxRowsPerPush of the link under test (<= the template's)
  int zero_every = 5;          // every k-th call pushes 0 rows
  int exact_every = 3;         // every k-th call pushes exactly `bound`
  int over_at = -1;            // this call pushes bound + 1 rows (a contract violation)
  int throw_at = -1;           // this call's work throws after pushing half its rows
  int miscount_at = -1;        // this call's work counts 3 rows it never pushes (row_pusher::count misused)
  int fail_at = -1;            // this call's work marks a push failed (what a full ring makes warp_push do)
  int slow_us = 0;             // work sleeps up to this long
  bool chunked = false;        // push a call's rows in one push(rows, n)
  int rows_of(int x) const {
    if (x == over_at) return bound + 1;
    if (zero_every > 0 && x % zero_every == 0) return 0;
    if (exact_every > 0 && x % exact_every == 0) return bound;
    return static_cast<int>((static_cast<std::uint64_t>(x) * 2654435761u ^ seed) % static_cast<std::uint64_t>(bound + 1));
  }
};

struct seen_rows {
  std::mutex m;
  std::vector<std::pair<unsigned long long, row>> got;  // (ring position, row), from the consumers' work
  std::atomic<int> batches{0};
  std::atomic<int> short_batches{0};
};

template <class P>
using numbers = dflash_test::numbers;

template <class P>
struct produce {  // host -> rows
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = rows;
  const plan* pl;
  void operator()(int&& x, rows& out, const DS& s) const {
    const int n = pl->rows_of(x);
    const auto push = out.pusher();
    const bool chunked = pl->chunked, boom = x == pl->throw_at, miscount = x == pl->miscount_at,
               failed = x == pl->fail_at;
    const int slow = pl->slow_us > 0 ? (x * 37) % (pl->slow_us + 1) : 0;
    s.enqueue([=] {
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(slow));
      std::vector<row> mine;
      for (int j = 0; j < n; ++j) mine.push_back({x, j});
      if (chunked) {
        if (!mine.empty() && !push.push(mine.data(), static_cast<std::uint32_t>(mine.size())))
          throw std::runtime_error("push of " + std::to_string(n) + " rows did not fit");
      } else {
        for (int j = 0; j < n; ++j) {
          if (boom && j == n / 2) throw std::runtime_error("enqueued work failed at call " + std::to_string(x));
          (void)push.push(mine[static_cast<std::size_t>(j)]);  // past the bound: the link reports it
        }
      }
      if (boom) throw std::runtime_error("enqueued work failed at call " + std::to_string(x));
      if (miscount) push.count(3);
      if (failed) push.fail();
    });
  }
};

template <class P>
struct consume {  // rows -> sink: reads its batch in work on its stream
  static constexpr dflash::fixed_string name{"consume"};
  using input_type = rows;
  using output_type = void;
  seen_rows* out;
  int batch;
  void operator()(rows& in, const DS& s) const {
    const auto b = in.batch();
    seen_rows* o = out;
    const int want = batch;
    s.enqueue([=] {
      const std::uint32_t n = b.count();
      std::lock_guard lk(o->m);
      for (std::uint32_t i = 0; i < n; ++i) o->got.push_back({b.ticket->first + i, b[i]});
      o->batches.fetch_add(1);
      if (static_cast<int>(n) < want) o->short_batches.fetch_add(1);
    });
  }
};

constexpr std::uint32_t max_bound = 16, batch_rows = 8;
template <class P, std::uint32_t Batch = batch_rows>
using rows_pipeline =
    dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, produce<P>,
                     dflash::device_queue_link<"rows", 64, max_bound, Batch>, consume<P>>;

// Every row of every call arrives once, a call's rows in push order.
std::string check_rows(const plan& pl, int items, seen_rows& s) {
  std::map<std::pair<int, int>, unsigned long long> where;
  for (const auto& [pos, r] : s.got) {
    if (r.item < 0 || r.item >= items || r.j < 0 || r.j >= pl.rows_of(r.item))
      return "a row that no call pushed: (" + std::to_string(r.item) + ", " + std::to_string(r.j) + ")";
    if (!where.emplace(std::pair{r.item, r.j}, pos).second)
      return "row (" + std::to_string(r.item) + ", " + std::to_string(r.j) + ") arrived twice";
  }
  long long expected = 0;
  for (int x = 0; x < items; ++x) {
    expected += pl.rows_of(x);
    for (int j = 1; j < pl.rows_of(x); ++j) {
      const auto a = where.find({x, j - 1}), b = where.find({x, j});
      if (a != where.end() && b != where.end() && a->second > b->second)
        return "call " + std::to_string(x) + "'s rows " + std::to_string(j - 1) + " and " + std::to_string(j) +
               " left in the wrong order";
    }
  }
  if (static_cast<long long>(where.size()) != expected)
    return std::to_string(expected - static_cast<long long>(where.size())) + " of " + std::to_string(expected) +
           " rows missing at a normal end";
  return {};
}

// Runs the default pipeline over `items` calls: what join() threw, or "" if it did not.
std::string join_error(const plan& pl, int items) {
  seen_rows seen;
  rows_pipeline<NullProfiler> p(numbers<NullProfiler>{items}, produce<NullProfiler>{&pl},
                                consume<NullProfiler>{&seen, static_cast<int>(batch_rows)});
  p.run();
  try {
    p.join();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

static_assert(dflash::PipelineLink<dflash::device_queue_link<"rows", 64, 16, 8>>);
static_assert(!dflash::device_queue_link<"rows", 64, 16, 8>::model({}).modelled());
static_assert(std::is_same_v<dflash::device_queue_link<"rows", 64, 16, 8>::delivery, dflash::delivers_rows_once>);

TEST_CASE("device_queue_link: every row once, across calls, with no host wait per item", "[device][rows]") {
  watchdog wd("device_queue_link matrix", 120s);
  for (int bound : {1, 4, 16})
    for (bool chunked : {false, true})
      for (int items : {0, 1, 50}) {
        CAPTURE(bound, chunked, items);
        plan pl;
        pl.bound = bound;
        pl.chunked = chunked;
        pl.slow_us = 200;
        seen_rows seen;
        rows_pipeline<NullProfiler> p(numbers<NullProfiler>{items}, produce<NullProfiler>{&pl},
                                      consume<NullProfiler>{&seen, static_cast<int>(batch_rows)});
        p.run();
        p.join();
        CHECK(check_rows(pl, items, seen) == "");
        CHECK(p.link<1>().rows_pushed() == p.link<1>().rows_popped());
        // The only host synchronisations are each device worker's one at its exit, and the
        // ring's at construction and as its pools of pinned counts grow: never one per item.
        const auto st = p.backend().stats();
        CHECK(st.host_waits == 0);
        CHECK(st.synchronizes < 2 + 20);
      }
}

TEST_CASE("device_queue_link: several producers and consumers share one ring", "[device][rows]") {
  watchdog wd("device_queue_link workers", 120s);
  for (auto [np, nc] : {std::pair{2u, 1u}, std::pair{4u, 3u}, std::pair{1u, 4u}}) {
    CAPTURE(np, nc);
    plan pl;
    pl.bound = 16;
    pl.slow_us = 300;
    seen_rows seen;
    auto shape = rows_pipeline<NullProfiler>::default_shape();
    shape.workers[1] = np;
    shape.workers[2] = nc;
    shape.depths[1] = 16 + static_cast<std::size_t>(np);  // capacity in rows: tight, so producers wait
    rows_pipeline<NullProfiler> p(shape, numbers<NullProfiler>{120}, produce<NullProfiler>{&pl},
                                  consume<NullProfiler>{&seen, static_cast<int>(batch_rows)});
    p.run();
    p.join();
    CHECK(check_rows(pl, 120, seen) == "");
  }
}

TEST_CASE("device_queue_link: a pop waits for the calls published before it, so exact calls fill whole batches",
          "[device][rows]") {
  // Every call pushes exactly BatchRows rows, slowly: a pop that did not wait
  // for the published calls' work would find their rows unwritten and come back short.
  watchdog wd("device_queue_link pop waits");
  plan pl;
  pl.bound = 16;
  pl.zero_every = 0;
  pl.exact_every = 1;
  pl.slow_us = 500;
  seen_rows seen;
  auto shape = rows_pipeline<NullProfiler, 16>::default_shape();
  shape.workers[1] = 2;
  shape.workers[2] = 2;
  rows_pipeline<NullProfiler, 16> p(shape, numbers<NullProfiler>{60}, produce<NullProfiler>{&pl},
                                    consume<NullProfiler>{&seen, 16});
  p.run();
  p.join();
  CHECK(check_rows(pl, 60, seen) == "");
  CHECK(seen.batches.load() == 60);
  CHECK(seen.short_batches.load() == 0);
}

TEST_CASE("device_queue_link: a call that pushes past MaxRowsPerPush fails the run, naming it", "[device][rows]") {
  watchdog wd("device_queue_link bound");
  plan pl;
  pl.bound = 16;
  pl.over_at = 7;  // pushes 17 rows through a link declared for 16
  CHECK_THAT(join_error(pl, 30), Catch::Contains("pushed 17 rows, more than MaxRowsPerPush = 16"));
}

TEST_CASE("device_queue_link: a producer's work that throws after pushing some rows fails the run", "[device][rows]") {
  watchdog wd("device_queue_link throw");
  plan pl;
  pl.bound = 16;
  pl.zero_every = 0;
  pl.exact_every = 1;
  pl.throw_at = 11;
  CHECK_THAT(join_error(pl, 40), Catch::Contains("enqueued work failed at call 11"));
}

TEST_CASE("device_queue_link: counts that do not match the rows fail the run, never hang it", "[device][rows]") {
  watchdog wd("device_queue_link miscount");
  plan pl;
  pl.bound = 8;  // room for the 3 extra rows: only the end can tell
  pl.miscount_at = 5;
  CHECK_THAT(join_error(pl, 20), Catch::Contains("the ring is empty with") && Catch::Contains("row_pusher::count"));
  plan failed;
  failed.fail_at = 3;
  CHECK_THAT(join_error(failed, 20), Catch::Contains("did not fit the ring; its rows are lost"));
}

TEST_CASE("device_queue_link: bad capacity is a clear error", "[device][rows]") {
  B b;
  using q = dflash::row_queue<row, B, NullProfiler, "rows", 16, 8>;
  CHECK_THROWS_WITH(q(b, 0), Catch::Contains("capacity must be"));
  CHECK_THROWS_WITH(q(b, 15), Catch::Contains("capacity 15 is below MaxRowsPerPush 16"));
  CHECK_NOTHROW(q(b, 16));
}

TEST_CASE("device_queue_link: the profiled table has its waits; the what-if refuses to model it", "[device][rows]") {
  watchdog wd("device_queue_link profile");
  plan pl;
  seen_rows seen;
  dflash::AccumulatingProfiler<dflash::pipeline_keys<rows_pipeline<NullProfiler>>> prof;
  rows_pipeline<decltype(prof)> p(prof, numbers<decltype(prof)>{40}, produce<decltype(prof)>{&pl},
                                  consume<decltype(prof)>{&seen, static_cast<int>(batch_rows)});
  p.run();
  p.join();
  CHECK(check_rows(pl, 40, seen) == "");
  using namespace dflash::literals;
  CHECK(prof.count("rows.push_wait"_key) == 40);
  CHECK(prof.count("rows.pop_wait"_key) >= 1);
  const auto lay = p.layout();
  const auto cm = dflash::analysis::calibrate(prof.snapshot(), lay);
  CHECK_THAT(cm.why_not, Catch::Contains("no model for link 'rows'"));
}

// ---- randomized stress ---------------------------------------------------------------
namespace {
std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

template <std::uint32_t Batch>
std::string stress_one(std::uint64_t seed, std::uint64_t index, std::mt19937_64& r) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); };
  plan pl;
  pl.seed = seed ^ index;
  pl.bound = pick(1, static_cast<int>(max_bound));
  pl.zero_every = pick(0, 4);
  pl.exact_every = pick(0, 3);
  pl.chunked = pick(0, 1) == 1;
  pl.slow_us = pick(0, 1) ? pick(0, 400) : 0;
  const int fault = pick(0, 9);  // 0-5 clean, 6 throw, 7 over the bound, 8 cancel, 9 drain
  const int items = pick(0, 150);
  if (fault == 6) pl.throw_at = pick(0, std::max(0, items - 1));
  if (fault == 7) {  // past the link's bound, not the plan's
    pl.bound = static_cast<int>(max_bound);
    pl.over_at = pick(0, std::max(0, items - 1));
  }
  auto shape = rows_pipeline<NullProfiler, Batch>::default_shape();
  shape.workers[1] = static_cast<std::size_t>(pick(1, 8));
  shape.workers[2] = static_cast<std::size_t>(pick(1, 4));
  shape.depths[0] = static_cast<std::size_t>(pick(1, 8));
  shape.depths[1] = static_cast<std::size_t>(pick(static_cast<int>(max_bound), 4 * static_cast<int>(max_bound)));
  const std::string what = "DFLASH_STRESS_SEED=" + std::to_string(seed) + " DFLASH_STRESS_INDEX=" +
                           std::to_string(index) + ": batch " + std::to_string(Batch) + ", bound " +
                           std::to_string(pl.bound) + ", items " + std::to_string(items) + ", workers " +
                           std::to_string(shape.workers[1]) + "/" + std::to_string(shape.workers[2]) + ", capacity " +
                           std::to_string(shape.depths[1]) + ", fault " + std::to_string(fault);
  watchdog wd(what, 60s);
  seen_rows seen;
  std::string thrown;
  bool stopped = false;
  {
    rows_pipeline<NullProfiler, Batch> p(shape, numbers<NullProfiler>{items}, produce<NullProfiler>{&pl},
                                         consume<NullProfiler>{&seen, static_cast<int>(Batch)});
    p.run();
    if (fault >= 8) {
      std::this_thread::sleep_for(std::chrono::microseconds(pick(0, 3000)));
      p.stop(fault == 8 ? dflash::stop_mode::cancel : dflash::stop_mode::drain);
      stopped = true;
    }
    try {
      p.join();
    } catch (const std::exception& e) {
      thrown = e.what();
    }
  }
  const bool faulty = (fault == 6 || fault == 7) && items > 0;
  if (!thrown.empty() && !faulty) return what + ": the run failed: " + thrown;
  if (faulty && pl.rows_of(fault == 6 ? pl.throw_at : pl.over_at) > 0 && thrown.empty() && !stopped)
    return what + ": the fault did not fail the run";
  if (thrown.empty() && !stopped) {
    const std::string bad = check_rows(pl, items, seen);
    if (!bad.empty()) return what + ": " + bad;
  } else {
    // Stopped or failed: whatever arrived arrived once and in order.
    std::map<std::pair<int, int>, int> once;
    for (const auto& [pos, rw] : seen.got)
      if (++once[{rw.item, rw.j}] > 1) return what + ": a row arrived twice after a stop";
  }
  return {};
}
}  // namespace

TEST_CASE("device_queue_link stress: 0 lost, 0 duplicated, 0 hangs", "[device][rows][stress]") {
  const std::uint64_t seed =
      env_u64("DFLASH_STRESS_SEED", static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const char* only = std::getenv("DFLASH_STRESS_INDEX");
  const auto budget = std::chrono::seconds(env_u64("DFLASH_STRESS_SECONDS", 3));
  std::printf("device_queue_link: DFLASH_STRESS_SEED=%llu\n", static_cast<unsigned long long>(seed));
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t i = only && *only ? std::strtoull(only, nullptr, 10) : 0, n = 0;
  for (;; ++i, ++n) {
    if (only && *only ? n == 1 : std::chrono::steady_clock::now() - t0 >= budget) break;
    std::mt19937_64 r(seed * 0x9E3779B97F4A7C15ull + i);
    const int batch = std::uniform_int_distribution<int>(0, 2)(r);
    const std::string err = batch == 0 ? stress_one<1>(seed, i, r) : batch == 1 ? stress_one<5>(seed, i, r)
                                                                                 : stress_one<32>(seed, i, r);
    if (!err.empty()) {
      FAIL_CHECK(err);
      return;
    }
  }
  std::printf("device_queue_link: %llu scenarios passed\n", static_cast<unsigned long long>(n));
  CHECK(n > 0);
}
