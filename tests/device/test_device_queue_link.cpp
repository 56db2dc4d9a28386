// dflash::device_queue_link on the asynchronous host twin: producer calls push
// a number of rows only their enqueued work knows, consumers pop batches of
// their own size across calls, and the host learns counts only from events it
// polls. Work runs later on the streams' threads, so a missing wait or a
// capacity returned too early is a wrong result here and a data race under TSan.
//
// The [stress] family draws scenarios from (seed, index): DFLASH_STRESS_SEED /
// _INDEX / _SECONDS, see stress_sweep.hpp.
#include <catch2/catch.hpp>
#include <dflash/analysis.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>
#include <dflash/profile.hpp>

#include "numbers_source.hpp"
#include "stress_sweep.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <array>
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
#include <type_traits>
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
template <class Elem = void>
using rows_of = dflash::device_rows<row, B, Elem>;
using rows = rows_of<>;
// A payload row's k-th element: every row's payload is its own.
int payload_value(int item, int j, int k) { return item * 4096 + j * 64 + k; }

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
  int mid_push_us = 0;         // chunked: every third call's work sleeps this long between reserving its rows and publishing them
  int host_after_us = 0;       // the stage sleeps this long after enqueueing its work (before its call is published)
  bool chunked = false;        // push a call's rows in one push(rows, n), or one reservation
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
  std::atomic<int> empty_batches{0};
  std::atomic<int> bad_payloads{0};
};

template <class P>
using numbers = dflash_test::numbers;

template <class P, class Elem = void>
struct produce {  // host -> rows
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = rows_of<Elem>;
  const plan* pl;
  void operator()(int&& x, rows_of<Elem>& out, const DS& s) const {
    const int n = pl->rows_of(x);
    const auto push = out.pusher();
    const bool chunked = pl->chunked, boom = x == pl->throw_at, miscount = x == pl->miscount_at,
               failed = x == pl->fail_at;
    const int slow = pl->slow_us > 0 ? (x * 37) % (pl->slow_us + 1) : 0;
    const int mid = x % 3 == 0 ? pl->mid_push_us : 0;  // some calls hold positions while later ones complete
    s.enqueue([=] {
      if (slow) std::this_thread::sleep_for(std::chrono::microseconds(slow));
      std::vector<row> mine;
      for (int j = 0; j < n; ++j) mine.push_back({x, j});
      if constexpr (std::is_void_v<Elem>) {
        if (chunked && mid > 0) {  // positions held, not yet written, for a while
          if (n == 0) return;
          const dflash::ring_ticket t = push.reserve(static_cast<std::uint32_t>(n));
          if (t.status != dflash::ring_status::ok) throw std::runtime_error("reserve of " + std::to_string(n) + " rows failed");
          for (int j = 0; j < n; ++j) push.row(t, static_cast<std::uint32_t>(j)) = mine[static_cast<std::size_t>(j)];
          std::this_thread::sleep_for(std::chrono::microseconds(mid));
          for (int j = 0; j < n; ++j) push.publish(t, static_cast<std::uint32_t>(j));
        } else if (chunked) {
          if (!mine.empty() && !push.push(mine.data(), static_cast<std::uint32_t>(mine.size())))
            throw std::runtime_error("push of " + std::to_string(n) + " rows did not fit");
        } else {
          for (int j = 0; j < n; ++j) {
            if (boom && j == n / 2) throw std::runtime_error("enqueued work failed at call " + std::to_string(x));
            (void)push.push(mine[static_cast<std::size_t>(j)]);  // past the bound: the link reports it
          }
        }
      } else {
        std::vector<Elem> p(push.width);
        const auto fill_payload = [&](int j) {
          for (std::uint32_t k = 0; k < push.width; ++k) p[k] = static_cast<Elem>(payload_value(x, j, static_cast<int>(k)));
        };
        if (chunked) {  // one reservation, rows and payloads written apart, then published
          if (n == 0) return;
          const dflash::ring_ticket t = push.reserve(static_cast<std::uint32_t>(n));
          if (t.status != dflash::ring_status::ok) throw std::runtime_error("reserve of " + std::to_string(n) + " rows failed");
          for (int j = 0; j < n; ++j) {
            fill_payload(j);
            std::copy(p.begin(), p.end(), push.payload(t, static_cast<std::uint32_t>(j)));
            push.row(t, static_cast<std::uint32_t>(j)) = mine[static_cast<std::size_t>(j)];
          }
          if (mid > 0) std::this_thread::sleep_for(std::chrono::microseconds(mid));
          for (int j = 0; j < n; ++j) push.publish(t, static_cast<std::uint32_t>(j));
        } else {
          for (int j = 0; j < n; ++j) {
            if (boom && j == n / 2) throw std::runtime_error("enqueued work failed at call " + std::to_string(x));
            fill_payload(j);
            (void)push.push(mine[static_cast<std::size_t>(j)], p.data());
          }
        }
      }
      if (boom) throw std::runtime_error("enqueued work failed at call " + std::to_string(x));
      if (miscount) push.count(3);
      if (failed) push.fail();
    });
    if (pl->host_after_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(pl->host_after_us));
  }
};

template <class P, class Elem = void>
struct consume {  // rows -> sink: reads its batch in work on its stream
  static constexpr dflash::fixed_string name{"consume"};
  using input_type = rows_of<Elem>;
  using output_type = void;
  seen_rows* out;
  int batch;
  void operator()(rows_of<Elem>& in, const DS& s) const {
    const auto b = in.batch();
    seen_rows* o = out;
    const int want = batch;
    s.enqueue([=] {
      const std::uint32_t n = b.count();
      if constexpr (!std::is_void_v<Elem>)
        for (std::uint32_t i = 0; i < n; ++i)
          for (std::uint32_t k = 0; k < b.width; ++k)
            if (b.payload(i)[k] != static_cast<Elem>(payload_value(b[i].item, b[i].j, static_cast<int>(k))))
              o->bad_payloads.fetch_add(1);
      std::lock_guard lk(o->m);
      for (std::uint32_t i = 0; i < n; ++i) o->got.push_back({b.ticket->first + i, b[i]});
      o->batches.fetch_add(1);
      if (static_cast<int>(n) < want) o->short_batches.fetch_add(1);
      if (n == 0) o->empty_batches.fetch_add(1);
    });
  }
};

constexpr std::uint32_t max_bound = 16, batch_rows = 8;
template <class P, std::uint32_t Batch = batch_rows, class Fill = dflash::partial_batches, class Elem = void>
using rows_pipeline =
    dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in", 4>, produce<P, Elem>,
                     dflash::device_queue_link<"rows", 64, max_bound, Batch, Fill>, consume<P, Elem>>;

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

TEST_CASE("device_queue_link: rows with a payload of a run-time width arrive whole", "[device][rows]") {
  watchdog wd("device_queue_link payload");
  for (bool chunked : {false, true})
    for (std::size_t width : {1u, 3u, 40u}) {
      CAPTURE(chunked, width);
      plan pl;
      pl.bound = 16;
      pl.chunked = chunked;  // reserve, write rows and payloads apart, publish
      pl.slow_us = 100;
      seen_rows seen;
      using pipe = rows_pipeline<NullProfiler, batch_rows, dflash::partial_batches, float>;
      auto shape = pipe::default_shape();
      shape.workers[1] = 3;
      shape.rows[1].width = width;
      pipe p(shape, numbers<NullProfiler>{80}, produce<NullProfiler, float>{&pl},
             consume<NullProfiler, float>{&seen, static_cast<int>(batch_rows)});
      p.run();
      p.join();
      CHECK(check_rows(pl, 80, seen) == "");
      CHECK(seen.bad_payloads.load() == 0);
      CHECK(p.link<1>().sizes() == dflash::row_sizes{16, batch_rows, width});
    }
}

TEST_CASE("device_queue_link: the shape sets the sizes at run time, and says what is wrong", "[device][rows]") {
  watchdog wd("device_queue_link sizes");
  plan pl;
  pl.bound = 3;
  pl.zero_every = 0;
  pl.exact_every = 1;  // every call pushes 3 rows
  seen_rows seen;
  auto shape = rows_pipeline<NullProfiler, batch_rows, dflash::full_batches>::default_shape();
  shape.rows[1] = {3, 12, 0};  // over 16 and 8
  rows_pipeline<NullProfiler, batch_rows, dflash::full_batches> p(shape, numbers<NullProfiler>{40},
                                                                   produce<NullProfiler>{&pl},
                                                                   consume<NullProfiler>{&seen, 12});
  p.run();
  p.join();
  CHECK(check_rows(pl, 40, seen) == "");
  CHECK(seen.batches.load() == 10);  // 120 rows in whole batches of 12
  CHECK(seen.short_batches.load() == 0);

  // A payload needs its width; rows sizes belong to a rows link only.
  using payload_pipe = rows_pipeline<NullProfiler, batch_rows, dflash::partial_batches, float>;
  CHECK_THROWS_WITH(payload_pipe(numbers<NullProfiler>{4}, produce<NullProfiler, float>{&pl},
                                 consume<NullProfiler, float>{&seen, 8}),
                    Catch::Contains("shape.rows.width") && Catch::Contains("must be between 1"));
  auto bad = rows_pipeline<NullProfiler>::default_shape();
  bad.rows[0].batch = 4;  // link 0 is a queue_link
  CHECK_THROWS_WITH(rows_pipeline<NullProfiler>(bad, numbers<NullProfiler>{1}, produce<NullProfiler>{&pl},
                                                consume<NullProfiler>{&seen, 8}),
                    Catch::Contains("link 0 ('in') does not carry rows: shape.rows[0]"));
}

TEST_CASE("device_queue_link: full_batches hands out whole batches but the last", "[device][rows]") {
  // Calls push 0..16 rows; batches of 8 would mostly come back short if a pop
  // took what is there. With full_batches each pop waits until the host has
  // counted a whole batch, and takes exactly that.
  watchdog wd("device_queue_link full batches");
  for (std::size_t producers : {1u, 4u})
    for (std::size_t consumers : {1u, 3u}) {
      CAPTURE(producers, consumers);
      plan pl;
      pl.bound = 16;
      pl.slow_us = 300;
      // A call's work holds its positions unwritten while its host thread has
      // not published it yet: a pop that took what is there would come back short.
      pl.chunked = true;
      pl.mid_push_us = 400;
      pl.host_after_us = 600;
      seen_rows seen;
      using pipe = rows_pipeline<NullProfiler, batch_rows, dflash::full_batches>;
      auto shape = pipe::default_shape();
      shape.workers[1] = producers;
      shape.workers[2] = consumers;
      pipe p(shape, numbers<NullProfiler>{150}, produce<NullProfiler>{&pl},
             consume<NullProfiler>{&seen, static_cast<int>(batch_rows)});
      p.run();
      p.join();
      CHECK(check_rows(pl, 150, seen) == "");
      long long rows = 0;
      for (int x = 0; x < 150; ++x) rows += pl.rows_of(x);
      const int partial = seen.short_batches.load() - seen.empty_batches.load();
      CHECK(partial == (rows % batch_rows ? 1 : 0));
      CHECK(seen.batches.load() - seen.empty_batches.load() == (rows + batch_rows - 1) / batch_rows);
      // One producer stream: no running call holds positions among counted rows;
      // one consumer: no later pop overtakes an earlier one on the device.
      if (producers == 1 && consumers == 1) CHECK(seen.empty_batches.load() == 0);
      const auto st = p.link<1>().stats();
      CHECK(st.rows_in == static_cast<std::uint64_t>(rows));
      CHECK(st.rows_out == static_cast<std::uint64_t>(rows));
      CHECK(st.batches == static_cast<std::uint64_t>(seen.batches.load()));
      CHECK(st.empty_batches == static_cast<std::uint64_t>(seen.empty_batches.load()));
      CHECK(st.short_batches == static_cast<std::uint64_t>(partial));
      CHECK(st.fill_samples == st.batches);
      CHECK(st.fill_max <= p.link<1>().capacity());
      CHECK(p.backend().stats().host_waits == 0);
    }
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
  using q = dflash::row_queue<row, B, NullProfiler, "rows">;
  const dflash::row_sizes z{16, 8, 0};
  CHECK_THROWS_WITH(q(b, 0, z), Catch::Contains("capacity must be"));
  CHECK_THROWS_WITH(q(b, 1, {1, 1, 0}), Catch::Contains("capacity must be at least 2 (got 1)"));
  CHECK_THROWS_WITH(q(b, 15, z), Catch::Contains("capacity 15 is below MaxRowsPerPush 16"));
  CHECK_NOTHROW(q(b, 16, z));
  CHECK_THROWS_WITH(q(b, 16, {0, 8, 0}), Catch::Contains("MaxRowsPerPush (shape.rows.max_per_push) must be between 1"));
  CHECK_THROWS_WITH(q(b, 16, {16, 0, 0}), Catch::Contains("BatchRows (shape.rows.batch) must be between 1"));
  CHECK_THROWS_WITH(q(b, 16, {16, 8, 4}), Catch::Contains("carry no payload") && Catch::Contains("width must be 0"));
  using with_payload = dflash::row_queue<row, B, NullProfiler, "rows", float>;
  CHECK_THROWS_WITH(with_payload(b, 16, z), Catch::Contains("shape.rows.width") && Catch::Contains("got 0"));
  CHECK_NOTHROW(with_payload(b, 16, {16, 8, 3}));
  using full = dflash::row_queue<row, B, NullProfiler, "rows", void, dflash::full_batches>;
  CHECK_THROWS_WITH(full(b, 22, z), Catch::Contains("below BatchRows + MaxRowsPerPush - 1 = 23"));
  CHECK_NOTHROW(full(b, 23, z));
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
template <class Fill, class Elem>
std::string stress_one(std::uint64_t seed, std::uint64_t index, std::mt19937_64& r) {
  constexpr bool full = std::is_same_v<Fill, dflash::full_batches>;
  using pipe = rows_pipeline<NullProfiler, batch_rows, Fill, Elem>;
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); };
  plan pl;
  pl.seed = seed ^ index;
  const int link_bound = pick(1, static_cast<int>(max_bound));  // the shape's, over the link's 16
  const int batch = std::array{1, 5, 32}[static_cast<std::size_t>(pick(0, 2))];
  pl.bound = pick(1, link_bound);
  pl.zero_every = pick(0, 4);
  pl.exact_every = pick(0, 3);
  pl.chunked = pick(0, 1) == 1;
  pl.slow_us = pick(0, 1) ? pick(0, 400) : 0;
  pl.mid_push_us = pick(0, 2) == 0 ? pick(1, 300) : 0;
  pl.host_after_us = pick(0, 2) == 0 ? pick(1, 300) : 0;
  const int fault = pick(0, 9);  // 0-5 clean, 6 throw, 7 over the bound, 8 cancel, 9 drain
  const int items = pick(0, 150);
  if (fault == 6) pl.throw_at = pick(0, std::max(0, items - 1));
  if (fault == 7) {  // past the link's bound, not the plan's
    pl.bound = link_bound;
    pl.over_at = pick(0, std::max(0, items - 1));
  }
  auto shape = pipe::default_shape();
  shape.workers[1] = static_cast<std::size_t>(pick(1, 8));
  shape.workers[2] = static_cast<std::size_t>(pick(1, 4));
  shape.depths[0] = static_cast<std::size_t>(pick(1, 8));
  const int least = std::max(2, full ? batch + link_bound - 1 : link_bound);
  shape.depths[1] = static_cast<std::size_t>(pick(least, least + 3 * link_bound));
  shape.rows[1] = {static_cast<std::size_t>(link_bound), static_cast<std::size_t>(batch),
                   std::is_void_v<Elem> ? 0u : static_cast<std::size_t>(pick(1, 9))};
  const std::string what = "DFLASH_STRESS_SEED=" + std::to_string(seed) + " DFLASH_STRESS_INDEX=" +
                           std::to_string(index) + ": " + (full ? "full" : "partial") + " batches of " +
                           std::to_string(batch) + ", payload width " + std::to_string(shape.rows[1].width) +
                           ", link bound " + std::to_string(link_bound) + ", call bound " + std::to_string(pl.bound) +
                           ", items " + std::to_string(items) + ", mid-push " + std::to_string(pl.mid_push_us) +
                           " us, host after " + std::to_string(pl.host_after_us) + " us, workers " + std::to_string(shape.workers[1]) + "/" +
                           std::to_string(shape.workers[2]) + ", capacity " + std::to_string(shape.depths[1]) +
                           ", fault " + std::to_string(fault);
  watchdog wd(what, 60s);
  seen_rows seen;
  std::string thrown;
  bool stopped = false;
  {
    pipe p(shape, numbers<NullProfiler>{items}, produce<NullProfiler, Elem>{&pl}, consume<NullProfiler, Elem>{&seen, batch});
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
  if (seen.bad_payloads.load() != 0) return what + ": " + std::to_string(seen.bad_payloads.load()) + " payload elements wrong";
  if (thrown.empty() && !stopped) {
    const std::string bad = check_rows(pl, items, seen);
    if (!bad.empty()) return what + ": " + bad;
    // full_batches: every batch that has rows has a whole batch, but the one rest.
    const int partial = seen.short_batches.load() - seen.empty_batches.load();
    if (full && partial > 1) return what + ": " + std::to_string(partial) + " short batches with full_batches (at most 1)";
    if (full && shape.workers[1] == 1 && shape.workers[2] == 1 && seen.empty_batches.load() != 0)
      return what + ": an empty batch with one producer stream, one consumer and full_batches";
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
  dflash_test::sweep("device_queue_link", [](std::uint64_t seed, std::uint64_t i) {
    std::mt19937_64 r(seed * 0x9E3779B97F4A7C15ull + i);
    const int kind = std::uniform_int_distribution<int>(0, 3)(r);  // fill x payload
    return kind == 0   ? stress_one<dflash::partial_batches, void>(seed, i, r)
           : kind == 1 ? stress_one<dflash::full_batches, void>(seed, i, r)
           : kind == 2 ? stress_one<dflash::partial_batches, float>(seed, i, r)
                       : stress_one<dflash::full_batches, float>(seed, i, r);
  });
}
