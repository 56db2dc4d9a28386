// graphed<S> on the asynchronous host twin: a stage's launches captured once per key (slot
// buffers) and replayed per item, later, on the stream's thread. Per-item values travel through
// slot memory (prepare's write, on the stream), so a replay computes each item's own result; a stage that bakes
// an item's value into its launch is caught (the control); what cannot be captured fails naming
// the stage; a producer into a device_queue_link keys on its worker's scratch; randomized runs
// over depths, workers, sizes and call shapes keep every item (every row) once.
#include <catch2/catch.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/graphed.hpp>
#include <dflash/pipeline/links/device_queue.hpp>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "collect_sink.hpp"
#include "numbers_source.hpp"
#include "stress_sweep.hpp"
#include "watchdog.hpp"

using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

namespace {
struct slot : dflash::device_item<B> {
  int value = -1;  // host field: the item
  dflash::device_buffer<int, B> param;  // the per-item value, in "device" memory
  dflash::device_buffer<int, B> data;
};
int pattern(int x, std::size_t i) { return x * 31 + static_cast<int>(i); }

struct fill_opts {
  std::size_t words = 64;
  bool vary_size = false;  // items alternate between two buffer sizes: more keys, recaptures
  bool bake = false;       // the mistake: the item's value captured into the launch
  bool sync_in_launch = false;   // the mistake: a host synchronisation inside launch()
  bool alloc_in_launch = false;  // the mistake: a buffer grown inside launch()
};

struct fill {  // host -> device link
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = slot;
  fill_opts o;
  std::size_t words_for(int x) const { return o.vary_size && x % 2 ? o.words * 2 : o.words; }
  void prepare(int& x, slot& out, const DS& s) const {
    out.value = x;
    int* p = out.param.ensure(1, s);
    out.data.ensure(words_for(x), s);
    // Not captured: the item's value, written on the stream before the replay reads it (a
    // small per-item launch; a copy from a host field would race with the slot's next item,
    // whose host fields are written as soon as the slot is free on the host).
    s.enqueue([p, x] { *p = x; });
  }
  void launch(const int& x, slot& out, const DS& s) const {
    if (o.sync_in_launch) s.backend().synchronize(s.native());
    if (o.alloc_in_launch) out.data.ensure(out.data.size() + 1, s);
    int* d = out.data.data();
    const int* p = out.param.data();
    const std::size_t n = out.data.size();
    if (o.bake) {
      s.enqueue([d, n, x] {
        for (std::size_t i = 0; i < n; ++i) d[i] = pattern(x, i);
      });
    } else {
      s.enqueue([d, n, p] {
        for (std::size_t i = 0; i < n; ++i) d[i] = pattern(*p, i);
      });
    }
  }
  auto graph_key(const int&, const slot& out) const {
    return std::tuple(out.data.data(), out.data.size(), out.param.data());
  }
};

struct relay {  // device link -> device link: doubles every word, graphed too
  static constexpr dflash::fixed_string name{"relay"};
  using input_type = slot;
  using output_type = slot;
  void prepare(slot& in, slot& out, const DS& s) const {
    out.value = in.value;
    out.data.ensure(in.data.size(), s);
  }
  void launch(slot& in, slot& out, const DS& s) const {
    const int* a = in.data.data();
    int* d = out.data.data();
    const std::size_t n = in.data.size();
    s.enqueue([a, d, n] {
      for (std::size_t i = 0; i < n; ++i) d[i] = 2 * a[i];
    });
  }
  auto graph_key(const slot& in, const slot& out) const {
    return std::tuple(in.data.data(), in.data.size(), out.data.data());
  }
};

struct result {
  int value = -1;
  int bad = -1;  // words that differ from the item's pattern, counted by the stream's work
};

template <int Factor>
struct check {  // device link -> host value
  static constexpr dflash::fixed_string name{"check"};
  using input_type = slot;
  using output_type = result;
  result operator()(slot& in, const DS& s) const {
    result r{in.value, 0};
    auto* bad = new int(0);
    const int* d = in.data.data();
    const std::size_t n = in.data.size();
    const int x = in.value;
    s.enqueue([d, n, x, bad] {
      for (std::size_t i = 0; i < n; ++i) *bad += d[i] != Factor * pattern(x, i);
    });
    s.backend().synchronize(s.native());  // a test's shortcut: read the count now
    r.bad = *bad;
    delete bad;
    return r;
  }
};

using collect = dflash_test::collect<result>;

// Host -> rows (a device_queue_link), graphed: only the device knows how many rows a call
// pushes, so the count lives in memory too. Per-item values go to this worker's scratch (its
// stream orders its items), and the key names the worker and the call's pusher (the link's
// records are reused: a few keys). after_launch runs once per item, outside the capture.
struct row_out {
  int item;
  int j;
};
using out_rows = dflash::device_rows<row_out, B>;
constexpr std::uint32_t row_bound = 4;
int rows_of(int x) { return (x * 7) % static_cast<int>(row_bound + 1); }

struct push_rows {
  static constexpr dflash::fixed_string name{"push_rows"};
  using input_type = int;
  using output_type = out_rows;
  std::shared_ptr<std::vector<dflash::device_buffer<int, B>>> scratch;  // [workers]: {item, rows}
  std::shared_ptr<std::atomic<int>> after = std::make_shared<std::atomic<int>>(0);
  void prepare(int& x, out_rows&, const DS& s, std::size_t w) const {
    int* p = scratch->at(w).ensure(2, s);
    s.enqueue([p, x] {
      p[0] = x;
      p[1] = rows_of(x);
    });
  }
  void launch(const int&, out_rows& out, const DS& s, std::size_t w) const {
    s.enqueue([p = scratch->at(w).data(), push = out.pusher()] {
      for (int j = 0; j < p[1]; ++j) (void)push.push(row_out{p[0], j});
    });
  }
  auto graph_key(const int&, const out_rows& out, std::size_t w) const {
    return std::tuple(w, out.pusher().pushed, scratch->at(w).data());
  }
  void after_launch(int&, out_rows&, const DS&, std::size_t) const { after->fetch_add(1); }
};

struct row_log {
  std::mutex m;
  std::vector<row_out> got;
};
struct take_rows {  // rows -> sink: its batch read in work on its stream
  static constexpr dflash::fixed_string name{"take_rows"};
  using input_type = out_rows;
  using output_type = void;
  row_log* log;
  void operator()(out_rows& in, const DS& s) const {
    s.enqueue([b = in.batch(), log = log] {
      const std::uint32_t n = b.count();
      const std::lock_guard lk(log->m);
      for (std::uint32_t i = 0; i < n; ++i) log->got.push_back(b[i]);
    });
  }
};
using rows_direct = dflash::Pipeline<dflash::NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                                     dflash::workers<dflash::graphed<push_rows>, 2>,
                                     dflash::device_queue_link<"rows", 32, row_bound, 6>, take_rows>;

struct rows_run {
  std::string wrong;
  dflash::graph_stats stats;
  int after = 0;
};
// n items through graphed<push_rows> -> take_rows: every row of every item once.
rows_run run_rows(int n, const rows_direct::shape_type& shape = rows_direct::default_shape()) {
  push_rows st;  // its scratch lives in the pipeline's copies only: freed before the pipeline's backend
  st.scratch = std::make_shared<std::vector<dflash::device_buffer<int, B>>>(
      shape.workers[rows_direct::stage_index<"push_rows">]);
  const auto after = st.after;
  row_log log;
  rows_direct p(shape, dflash_test::numbers{n}, dflash::graphed<push_rows>{std::move(st)}, take_rows{&log});
  p.run_to_completion();
  rows_run r{{}, p.stage<rows_direct::stage_index<"push_rows">>().stats(), after->load()};
  std::set<std::pair<int, int>> seen;
  std::size_t want = 0;
  for (int x = 0; x < n; ++x) want += static_cast<std::size_t>(rows_of(x));
  for (const row_out& o : log.got) {
    if (o.item < 0 || o.item >= n || o.j < 0 || o.j >= rows_of(o.item))
      r.wrong = "a row no item pushed: (" + std::to_string(o.item) + ", " + std::to_string(o.j) + ")";
    else if (!seen.emplace(o.item, o.j).second)
      r.wrong = "row (" + std::to_string(o.item) + ", " + std::to_string(o.j) + ") arrived twice";
    if (!r.wrong.empty()) return r;
  }
  if (seen.size() != want) r.wrong = std::to_string(seen.size()) + " of " + std::to_string(want) + " rows";
  return r;
}

using direct = dflash::Pipeline<dflash::NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                                dflash::workers<dflash::graphed<fill>, 2>, dflash::device_link<"hs", 4>, check<1>,
                                dflash::queue_link<"out", 8>, collect>;
using relayed = dflash::Pipeline<dflash::NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                                 dflash::workers<dflash::graphed<fill>, 2>, dflash::device_link<"hs", 4>,
                                 dflash::graphed<relay>, dflash::device_link<"hs2", 2>, check<2>,
                                 dflash::queue_link<"out", 8>, collect>;

// Every item once, each with its own values.
std::string verify(const std::vector<result>& got, int n) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const auto& r : got) {
    if (r.value < 0 || r.value >= n) return "item " + std::to_string(r.value) + " was never made";
    if (seen[static_cast<std::size_t>(r.value)]++) return "item " + std::to_string(r.value) + " arrived twice";
    if (r.bad != 0) return "item " + std::to_string(r.value) + ": " + std::to_string(r.bad) + " wrong words";
  }
  if (static_cast<int>(got.size()) != n) return std::to_string(got.size()) + " of " + std::to_string(n) + " items";
  return {};
}

// n items through graphed<fill> -> check: what verify() found wrong ("" if nothing), and the
// stage's counts.
struct direct_run {
  std::string wrong;
  dflash::graph_stats stats;
};
direct_run run_direct(int n, fill_opts o, const direct::shape_type& shape = direct::default_shape()) {
  std::vector<result> got;
  direct p(shape, dflash_test::numbers{n}, dflash::graphed<fill>{fill{o}}, check<1>{}, collect{&got});
  p.run_to_completion();
  return {verify(got, n), p.stage<direct::stage_index<"fill">>().stats()};
}
}  // namespace

TEST_CASE("graphed: one capture per slot, one launch per item, each item's own values", "[graphed]") {
  watchdog wd("graphed");
  std::vector<result> got;
  dflash::graphed<fill> g{fill{}};
  auto shape = direct::default_shape();
  shape.workers[direct::stage_index<"fill">] = 1;
  direct p(shape, dflash_test::numbers{100}, g, check<1>{}, collect{&got});
  p.run_to_completion();
  CHECK(verify(got, 100).empty());
  const auto st = p.stage<direct::stage_index<"fill">>().stats();
  CHECK(st.launches == 100);
  CHECK(st.captures >= 1);
  CHECK(st.captures <= 4);  // the link's 4 slots, whose buffers never grow
  CHECK(g.stats().launches == 100);  // copies share one cache
}

TEST_CASE("graphed: a slot whose buffers change gets a new capture", "[graphed]") {
  watchdog wd("graphed recapture");
  fill_opts o;
  o.vary_size = true;
  const direct_run r = run_direct(60, o);
  CHECK(r.wrong.empty());
  const auto& st = r.stats;
  CHECK(st.launches == 60);
  CHECK(st.captures >= 2);  // both sizes
  CHECK(st.captures <= 12);  // 4 slots x (small, large once grown, small again in the grown buffer)
}

TEST_CASE("graphed: an item's value baked into the launch is replayed stale (the control)", "[graphed]") {
  watchdog wd("graphed control");
  fill_opts o;
  o.bake = true;
  CHECK_FALSE(run_direct(40, o).wrong.empty());  // replays wrote the captured item's pattern
}

TEST_CASE("graphed: launch -> launch through two graphed stages", "[graphed]") {
  watchdog wd("graphed relay");
  std::vector<result> got;
  relayed p(dflash_test::numbers{80}, dflash::graphed<fill>{fill{}}, dflash::graphed<relay>{relay{}}, check<2>{},
            collect{&got});
  p.run_to_completion();
  CHECK(verify(got, 80).empty());
  CHECK(p.stage<relayed::stage_index<"relay">>().stats().launches == 80);
}

TEST_CASE("graphed: into a device_queue_link, per-worker scratch in the key, after_launch once per item",
          "[graphed]") {
  watchdog wd("graphed rows");
  const rows_run r = run_rows(120);
  CHECK(r.wrong.empty());
  CHECK(r.stats.launches == 120);
  CHECK(r.after == 120);
  CHECK(r.stats.captures >= 1);
}

TEST_CASE("graphed: work that cannot be captured fails the run naming the stage", "[graphed]") {
  watchdog wd("graphed error");
  const auto fails = [](fill_opts o, const char* why) {
    std::vector<result> got;
    direct p(dflash_test::numbers{10}, dflash::graphed<fill>{fill{o}}, check<1>{}, collect{&got});
    CHECK_THROWS_WITH(p.run_to_completion(),
                      Catch::Contains("dflash::graphed: stage 'fill': its launch() could not be captured") &&
                          Catch::Contains(why));
  };
  fill_opts sync;
  sync.sync_in_launch = true;  // a host synchronisation
  fails(sync, "synchronize: called while a stream is being captured");
  fill_opts alloc;
  alloc.alloc_in_launch = true;  // a buffer grown (freed and allocated) inside launch()
  fails(alloc, "allocate: called while a stream is being captured");
}

TEST_CASE("host twin capture: what may not be captured is refused, and leaves no trace", "[graphed]") {
  watchdog wd("twin capture refusals");
  B b;
  auto s = b.create_stream(), other = b.create_stream();
  auto e = b.create_event(false);
  b.begin_capture(s);
  CHECK_THROWS_AS(b.record(e, s), std::logic_error);       // an event on the capturing stream
  CHECK_THROWS_AS(b.synchronize(other), std::logic_error);  // a host wait by the capturing thread, any stream
  CHECK_THROWS_AS(b.host_wait(e), std::logic_error);
  CHECK_THROWS_AS((void)b.allocate_host(16), std::logic_error);
  int ran = 0;
  b.enqueue(s, [&ran] { ++ran; });  // a launch: recorded, not run
  const auto g = b.end_capture(s);
  CHECK(g->size() == 1);
  b.synchronize(s);
  CHECK(ran == 0);
  b.host_wait(e);  // the refused record left the event unrecorded: no wait, no hang
  b.launch_graph(g, s);
  b.launch_graph(g, s);
  b.synchronize(s);
  CHECK(ran == 2);
  b.begin_capture(s);
  b.abort_capture(s);
  b.synchronize(other);  // the thread captures nothing any more
  b.destroy_event(e);
  b.destroy_stream(s);
  b.destroy_stream(other);
}

TEST_CASE("graphed: randomized runs over depths, workers, sizes and call shapes keep every item once",
          "[graphed][stress]") {
  watchdog wd("graphed randomized", std::chrono::seconds(60));
  dflash_test::sweep("graphed", [](std::uint64_t seed, std::uint64_t index) -> std::string {
    std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
    auto pick = [&rng](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int n = pick(0, 150);
    fill_opts o;
    o.words = static_cast<std::size_t>(pick(1, 256));
    o.vary_size = pick(0, 1) == 1;
    const int call_shape = pick(0, 2);
    if (call_shape == 2) {  // host -> rows
      auto shape = rows_direct::default_shape();
      shape.depths[rows_direct::link_index<"rows">] = static_cast<std::size_t>(pick(static_cast<int>(row_bound), 40));
      shape.workers[rows_direct::stage_index<"push_rows">] = static_cast<std::size_t>(pick(1, 3));
      shape.workers[rows_direct::stage_index<"take_rows">] = static_cast<std::size_t>(pick(1, 2));
      const rows_run r = run_rows(n, shape);
      if (r.stats.launches != static_cast<std::uint64_t>(n) || r.after != n)
        return "launches " + std::to_string(r.stats.launches) + ", after_launch " + std::to_string(r.after);
      return r.wrong;
    }
    if (call_shape == 1) {
      auto shape = direct::default_shape();
      shape.depths[direct::link_index<"hs">] = static_cast<std::size_t>(pick(1, 6));
      shape.workers[direct::stage_index<"fill">] = static_cast<std::size_t>(pick(1, 3));
      shape.workers[direct::stage_index<"check">] = static_cast<std::size_t>(pick(1, 2));
      const direct_run r = run_direct(n, o, shape);
      if (r.stats.launches != static_cast<std::uint64_t>(n)) return "launches " + std::to_string(r.stats.launches);
      return r.wrong;
    }
    auto shape = relayed::default_shape();
    shape.depths[relayed::link_index<"hs">] = static_cast<std::size_t>(pick(1, 6));
    shape.depths[relayed::link_index<"hs2">] = static_cast<std::size_t>(pick(1, 4));
    shape.workers[relayed::stage_index<"fill">] = static_cast<std::size_t>(pick(1, 3));
    std::vector<result> got;
    relayed p(shape, dflash_test::numbers{n}, dflash::graphed<fill>{fill{o}}, dflash::graphed<relay>{relay{}},
              check<2>{}, collect{&got});
    p.run_to_completion();
    return verify(got, n);
  });
}
