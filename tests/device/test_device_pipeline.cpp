// dflash::Pipeline with device links, on the asynchronous host twin: stages
// enqueue their work on per-worker streams; the pipeline does every wait and
// record. Work runs later on the streams' threads, so a missing wait is a
// wrong result here and a data race under TSan.
#include <catch2/catch.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>
#include <dflash/queue/ring_control.hpp>

#include "watchdog.hpp"
#include "collect_sink.hpp"
#include "numbers_source.hpp"

#include <atomic>
#include <cstdlib>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
using dflash::NullProfiler;

namespace {
constexpr std::size_t words = 128;
int pattern(int x, std::size_t i) { return x * 7919 + static_cast<int>(i); }

struct tslot : dflash::device_item<B> {
  int value = -1;
  std::size_t producer = 0;
  dflash::device_buffer<int, B> data;
};

struct result {
  int value;
  std::size_t producer, consumer;
  std::unique_ptr<int> ok;  // written by the consumer's enqueued work
};

struct options {
  bool relaxed = false;         // atomic accesses: for the test that drops a wait on purpose
  int throw_at = -1;            // enqueued work of this value throws
  int slow_every = 5;           // every k-th item's producer work sleeps first
  int slow_ms = 1;
  std::atomic<int>* started = nullptr;
  std::atomic<int>* finished = nullptr;
};

template <class P>
using numbers = dflash_test::numbers;

template <class P>
struct fill {  // host -> device link
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = tslot;
  const options* o;
  void operator()(int&& x, tslot& out, const DS& s, std::size_t w) const {
    out.value = x;
    out.producer = w;
    int* d = out.data.ensure(words, s);
    const bool slow = o->slow_every > 0 && x % o->slow_every == 0, relaxed = o->relaxed, boom = x == o->throw_at;
    const auto pause = std::chrono::milliseconds(o->slow_ms);
    auto* started = o->started;
    auto* finished = o->finished;
    if (started) started->fetch_add(1);
    s.enqueue([=] {
      if (boom) throw std::runtime_error("enqueued work failed at item " + std::to_string(x));
      if (slow) std::this_thread::sleep_for(pause);
      for (std::size_t i = 0; i < words; ++i) {
        if (relaxed) std::atomic_ref<int>(d[i]).store(pattern(x, i), std::memory_order_relaxed);
        else d[i] = pattern(x, i);
      }
      if (finished) finished->fetch_add(1);
    });
  }
};

template <class P>
struct verify {  // device link -> host queue: the result is written asynchronously
  static constexpr dflash::fixed_string name{"verify"};
  using input_type = tslot;
  using output_type = result;
  const options* o;
  result operator()(tslot& in, const DS& s, std::size_t w) const {
    result r{in.value, in.producer, w, std::make_unique<int>(-1)};
    const int* d = in.data.data();
    int* ok = r.ok.get();
    const int x = in.value;
    const bool relaxed = o->relaxed;
    s.enqueue([=] {
      bool good = true;
      for (std::size_t i = 0; i < words; ++i)
        good = good && (relaxed ? std::atomic_ref<const int>(d[i]).load(std::memory_order_relaxed) : d[i]) == pattern(x, i);
      *ok = good ? 1 : 0;
    });
    return r;
  }
};

template <class P>
using collect = dflash_test::collect<result>;  // the pipeline waited for each result's work

template <class P>
using twin_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, dflash::workers<fill<P>, 2>,
                                       dflash::device_link<"hs_device", 4>, dflash::workers<verify<P>, 2>,
                                       dflash::queue_link<"out_q", 8>, collect<P>>;

// device -> device -> device: nothing but streams between the middle stages.
template <class P>
struct relay {
  static constexpr dflash::fixed_string name{"relay"};
  using input_type = tslot;
  using output_type = tslot;
  void operator()(tslot& in, tslot& out, const DS& s) const {
    out.value = in.value;
    out.producer = in.producer;
    int* dst = out.data.ensure(words, s);
    s.copy(dst, in.data.data(), words * sizeof(int));
  }
};
template <class P>
struct tally {  // device sink: counts intact items on its stream
  static constexpr dflash::fixed_string name{"tally"};
  using input_type = tslot;
  using output_type = void;
  int* intact;  // touched only by the enqueued work (one worker, one stream)
  int* seen;
  void operator()(tslot& in, const DS& s) const {
    const int* d = in.data.data();
    const int x = in.value;
    int* ok = intact;
    int* n = seen;
    s.enqueue([=] {
      bool good = true;
      for (std::size_t i = 0; i < words; ++i) good = good && d[i] == pattern(x, i);
      *ok += good ? 1 : 0;
      ++*n;
    });
  }
};
template <class P>
using chain_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, dflash::workers<fill<P>, 3>,
                                        dflash::device_link<"a_dev", 3>, relay<P>, dflash::device_link<"b_dev", 2>,
                                        tally<P>>;

void check_results(const std::vector<result>& got, int n) {
  dflash_test::check_exactly_once_in_producer_order(got, n, [](const result& r) { CHECK(*r.ok == 1); });
}
}  // namespace

TEST_CASE("device link in a Pipeline: exactly once, intact, in order per producer; 1-8 workers, K = 1..8",
          "[device][pipeline]") {
  watchdog wd("device pipeline matrix", std::chrono::seconds(120));
  options o;
  for (std::size_t k : {1u, 2u, 5u, 8u}) {
    for (auto [np, nc] : {std::pair{1u, 1u}, std::pair{2u, 3u}, std::pair{8u, 1u}, std::pair{1u, 8u}}) {
      CAPTURE(k, np, nc);
      auto shape = twin_pipeline<NullProfiler>::default_shape();
      shape.workers[1] = np;
      shape.workers[2] = nc;
      shape.depths[1] = k;
      std::vector<result> got;
      constexpr int n = 60;
      twin_pipeline<NullProfiler> p(shape, numbers<NullProfiler>{n}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                    collect<NullProfiler>{&got});
      p.run();
      p.join();
      check_results(got, n);
      const auto st = p.backend().stats();
      // No host synchronisation per item: one stream sync per device worker, at its exit; the
      // only host waits are the sink's, once per item, where device results enter host code.
      CHECK(st.synchronizes == np + nc);
      CHECK(st.host_waits == static_cast<std::uint64_t>(n));
      CHECK(st.timing_events == 0);  // NullProfiler: events are created without timing
      // ready + consumed per item on the link, + one event per item entering the host queue
      CHECK(st.records == static_cast<std::uint64_t>(3 * n));
    }
  }
}

TEST_CASE("device -> device -> device: no host wait at all on the per-item path", "[device][pipeline]") {
  watchdog wd("device chain");
  options o;
  for (int n : {10, 200}) {
    int intact = 0, seen = 0;
    chain_pipeline<NullProfiler> p(numbers<NullProfiler>{n}, fill<NullProfiler>{&o}, relay<NullProfiler>{},
                                   tally<NullProfiler>{&intact, &seen});
    p.run();
    p.join();
    CHECK(seen == n);
    CHECK(intact == n);
    const auto st = p.backend().stats();
    CHECK(st.host_waits == 0);
    CHECK(st.synchronizes == 3 + 1 + 1);  // at worker exit only: the same for 10 and 200 items
  }
}

TEST_CASE("device stages record .gpu from their events with a stateful policy; keys are compile-time",
          "[device][pipeline][keys]") {
  watchdog wd("device keys");
  using keys = dflash::pipeline_keys<twin_pipeline<dflash::NullProfiler>>;
  using expected =
      dflash::key_set<"numbers.wait", "numbers.work", "in_q.push_wait", "in_q.pop_wait", "fill.wait", "fill.work",
                      "fill.gpu", "fill.launch", "fill.age", "fill.age_clock_backwards", "fill.age_gpu_end", "hs_device.push_wait",
                      "hs_device.pop_wait", "verify.wait", "verify.work", "verify.gpu", "verify.launch", "verify.age",
                      "verify.age_clock_backwards", "verify.age_gpu_end", "out_q.push_wait", "out_q.pop_wait", "collect.wait", "collect.work", "collect.age",
                      "collect.age_clock_backwards", "collect.e2e">;
  STATIC_REQUIRE(std::is_same_v<keys, expected>);
  using prof_t = dflash::AccumulatingProfiler<keys>;
  prof_t prof;
  options o;
  o.slow_every = 1;  // every producer work sleeps 1 ms: fill.gpu must see it
  std::vector<result> got;
  twin_pipeline<prof_t> p(prof, numbers<prof_t>{40}, fill<prof_t>{&o}, verify<prof_t>{&o}, collect<prof_t>{&got});
  p.run();
  p.join();
  check_results(got, 40);
  const auto snap = prof.snapshot();
  CHECK(snap.find("fill.gpu")->count == 40);
  CHECK(snap.find("verify.gpu")->count == 40);
  CHECK(snap.find("fill.gpu")->min_ns >= 900'000u);
  // the host's enqueueing per item: the 1 ms sleep is the stream's, not the launch's
  CHECK(snap.find("fill.launch")->count == 40);
  CHECK(snap.find("verify.launch")->count == 40);
  CHECK(snap.find("fill.launch")->total_ns < snap.find("fill.gpu")->total_ns);
  // each item's age when the device work on it ended: after fill's 1 ms of it
  CHECK(snap.find("fill.age_gpu_end")->count == 40);
  CHECK(snap.find("verify.age_gpu_end")->count == 40);
  CHECK(snap.find("fill.age_gpu_end")->min_ns >= 900'000u);
  CHECK(snap.find("hs_device.pop_wait")->count >= 40);
  CHECK(p.backend().stats().timing_events > 0);
}

TEST_CASE("a throw inside enqueued work stops the pipeline; join() rethrows it", "[device][pipeline][error]") {
  watchdog wd("device error");
  options o;
  o.throw_at = 13;
  std::vector<result> got;
  twin_pipeline<NullProfiler> p(numbers<NullProfiler>{-1}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                collect<NullProfiler>{&got});
  p.run();
  CHECK_THROWS_WITH(p.join(), Catch::Contains("enqueued work failed at item 13"));
  for (const result& r : got) CHECK(*r.ok == 1);  // nothing unwritten reached the sink
}

TEST_CASE("stop() with device work in flight: every enqueued work completes before join() returns",
          "[device][pipeline][stop]") {
  watchdog wd("device cancel");
  std::atomic<int> started{0}, finished{0};
  options o;
  o.slow_every = 1;
  o.started = &started;
  o.finished = &finished;
  std::vector<result> got;
  {
    twin_pipeline<NullProfiler> p(numbers<NullProfiler>{-1}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                  collect<NullProfiler>{&got});
    p.run();
    std::this_thread::sleep_for(30ms);
    p.stop();
    p.join();
    CHECK(started.load() > 0);
    CHECK(finished.load() == started.load());
  }  // slots freed only now; ASan would see a late write
  for (const result& r : got) CHECK(*r.ok == 1);
}

TEST_CASE("stop(drain) delivers every item the source produced through the device link", "[device][pipeline][stop]") {
  watchdog wd("device drain");
  options o;
  std::vector<result> got;
  twin_pipeline<NullProfiler> p(numbers<NullProfiler>{-1}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                collect<NullProfiler>{&got});
  p.run();
  std::this_thread::sleep_for(20ms);
  p.stop(dflash::stop_mode::drain);
  p.join();
  const int produced = p.stage<0>().next;
  check_results(got, produced);
}

TEST_CASE("a dropped wait inside the pipeline is caught as wrong data", "[device][pipeline]") {
  watchdog wd("device dropped wait");
  options o;
  o.relaxed = true;   // the race is deliberate: atomics keep TSan quiet, the data shows it
  o.slow_every = 10;  // item 10's producer work sleeps first...
  o.slow_ms = 50;     // ...long enough that the consumer gets there first, even under TSan
  auto shape = twin_pipeline<NullProfiler>::default_shape();
  shape.workers[1] = 1;
  shape.workers[2] = 1;
  std::vector<result> got;
  twin_pipeline<NullProfiler> p(shape, numbers<NullProfiler>{20}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                collect<NullProfiler>{&got});
  p.link<1>().drop_ready_wait_for_testing(11);  // the consumer of item 10 skips its wait
  p.run();
  p.join();
  int broken = 0;
  for (const result& r : got) broken += *r.ok == 1 ? 0 : 1;
  CHECK(broken == 1);
}

// ---- variable-size items: a ring inside the slot ---------------------------------
// The producer's work pushes a data-dependent number of rows into the slot's
// ring (host_ring here; device_queue with CUB aggregation on a GPU); the
// consumer's work drains it. The count never crosses to the host: neither
// host thread knows it.
namespace {
struct ring_slot : dflash::device_item<B> {
  int value = -1;
  std::unique_ptr<dflash::host_ring<int>> rows;  // made on first use, drained every lap
};
int rows_for(int x) { return (x * 37) % 23; }  // 0..22 rows, decided "on the device"

template <class P>
struct push_rows {
  static constexpr dflash::fixed_string name{"push_rows"};
  using input_type = int;
  using output_type = ring_slot;
  void operator()(int&& x, ring_slot& out, const DS& s) const {
    out.value = x;
    if (!out.rows) out.rows = std::make_unique<dflash::host_ring<int>>(32);
    auto* ring = out.rows.get();
    s.enqueue([ring, x] {
      const int n = rows_for(x);  // computed in the work, like a kernel's data-dependent count
      std::vector<int> rows(static_cast<std::size_t>(n));
      for (int i = 0; i < n; ++i) rows[static_cast<std::size_t>(i)] = x * 100 + i;
      if (ring->try_push(rows.data(), static_cast<std::uint32_t>(n)) != dflash::ring_status::ok)
        throw std::runtime_error("ring full");
    });
  }
};
struct drained {
  int value;
  std::unique_ptr<std::vector<int>> rows;  // filled by the consumer's work
};
template <class P>
struct drain_rows {
  static constexpr dflash::fixed_string name{"drain_rows"};
  using input_type = ring_slot;
  using output_type = drained;
  drained operator()(ring_slot& in, const DS& s) const {
    drained d{in.value, std::make_unique<std::vector<int>>()};
    s.enqueue([ring = in.rows.get(), out = d.rows.get()] {
      int buf[8];
      for (;;) {
        const auto t = ring->try_pop(buf, 8);
        if (t.status != dflash::ring_status::ok) break;  // empty: the producer's work finished before ours
        out->insert(out->end(), buf, buf + t.count);
      }
    });
    return d;
  }
};
template <class P>
struct keep_drained {
  static constexpr dflash::fixed_string name{"keep"};
  using input_type = drained;
  using output_type = void;
  std::vector<drained>* out;
  void operator()(drained&& d) { out->push_back(std::move(d)); }
};
template <class P>
using ring_pipeline = dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, dflash::workers<push_rows<P>, 2>,
                                       dflash::device_link<"rows_dev", 3>, drain_rows<P>,
                                       dflash::queue_link<"out_q", 4>, keep_drained<P>>;
}  // namespace

TEST_CASE("variable-size items through a ring inside the slot: every row arrives, counts stay on the device side",
          "[device][pipeline]") {
  watchdog wd("ring in slot");
  std::vector<drained> got;
  ring_pipeline<NullProfiler> p(numbers<NullProfiler>{300}, push_rows<NullProfiler>{}, drain_rows<NullProfiler>{},
                                keep_drained<NullProfiler>{&got});
  p.run_to_completion();
  REQUIRE(got.size() == 300);
  for (const drained& d : got) {
    REQUIRE(d.rows->size() == static_cast<std::size_t>(rows_for(d.value)));
    for (std::size_t i = 0; i < d.rows->size(); ++i) CHECK((*d.rows)[i] == d.value * 100 + static_cast<int>(i));
  }
}

// ---- a device stage whose input is a host value that device work still writes ----
namespace {
template <class P>
struct late_result {  // device link -> host queue: the value is finished by enqueued work, later
  static constexpr dflash::fixed_string name{"late"};
  using input_type = tslot;
  using output_type = result;
  result operator()(tslot& in, const DS& s) const {
    result r{in.value, 0, 0, std::make_unique<int>(-1)};
    int* ok = r.ok.get();
    s.enqueue([ok] {
      std::this_thread::sleep_for(2ms);
      std::atomic_ref<int>(*ok).store(1, std::memory_order_relaxed);
    });
    return r;
  }
};
template <class P>
struct read_on_host {  // host queue -> device link: its host code reads the value as soon as it is called
  static constexpr dflash::fixed_string name{"read"};
  using input_type = result;
  using output_type = tslot;
  std::atomic<int>* unwritten;
  void operator()(result&& r, tslot& out, const DS& s) const {
    if (std::atomic_ref<int>(*r.ok).load(std::memory_order_relaxed) != 1) unwritten->fetch_add(1);
    out.value = r.value;
    int* d = out.data.ensure(words, s);
    const int x = r.value;
    s.enqueue([d, x] {
      for (std::size_t i = 0; i < words; ++i) d[i] = pattern(x, i);
    });
  }
};
template <class P>
using host_between_devices =
    dflash::Pipeline<P, numbers<P>, dflash::queue_link<"in_q", 4>, fill<P>, dflash::device_link<"a_dev", 2>,
                     late_result<P>, dflash::queue_link<"mid_q", 4>, read_on_host<P>, dflash::device_link<"b_dev", 2>,
                     tally<P>>;
}  // namespace

TEST_CASE("a device stage's host code never sees a host value that device work is still writing",
          "[device][pipeline]") {
  watchdog wd("device stage host input");
  options o;
  std::atomic<int> unwritten{0};
  int intact = 0, seen = 0;
  host_between_devices<NullProfiler> p(numbers<NullProfiler>{30}, fill<NullProfiler>{&o}, late_result<NullProfiler>{},
                                       read_on_host<NullProfiler>{&unwritten}, tally<NullProfiler>{&intact, &seen});
  p.run_to_completion();
  CHECK(unwritten.load() == 0);
  CHECK(seen == 30);
  CHECK(intact == 30);
}

namespace {
template <class P>
struct stop_in_work {  // device sink whose enqueued work ends the pipeline at item 5, the last one
  static constexpr dflash::fixed_string name{"tally"};
  using input_type = tslot;
  using output_type = void;
  void operator()(tslot& in, const DS& s) const {
    const int x = in.value;
    s.enqueue([x] {
      if (x == 5) {
        std::this_thread::sleep_for(20ms);  // surfaces after the worker left its loop: at its final synchronize
        throw dflash::pipeline_stop{};
      }
    });
  }
};
}  // namespace

TEST_CASE("pipeline_stop thrown inside enqueued work stops the pipeline as from a stage call", "[device][pipeline][stop]") {
  watchdog wd("device pipeline_stop in work");
  options o;
  using pipe = dflash::Pipeline<NullProfiler, numbers<NullProfiler>, dflash::queue_link<"in_q", 4>,
                                fill<NullProfiler>, dflash::device_link<"a_dev", 2>, stop_in_work<NullProfiler>>;
  for (int round = 0; round < 3; ++round) {
    pipe p(numbers<NullProfiler>{6}, fill<NullProfiler>{&o}, stop_in_work<NullProfiler>{});
    CHECK_NOTHROW(p.run_to_completion());  // a stop, not an error
    CHECK(p.cancelled());
  }
}

// The device link's handle lists are bounded queues whose try_push may see
// "full" while a pop of the slot before it is half done; a publish must still
// hand the item over (a dropped item would end its producer as if cancelled,
// with join() returning normally). 4 x 4 workers over K = 2 slots make such
// pops common; ROUNDS=n runs more (the window is narrow: about one round in
// thousands hits it).
TEST_CASE("device link under contention: no item lost, no early end (4 x 4 workers, K = 2)", "[device][pipeline]") {
  watchdog wd("device link contention", std::chrono::seconds(240));
  options o;
  o.slow_every = 0;
  auto shape = twin_pipeline<NullProfiler>::default_shape();
  shape.workers[1] = 4;
  shape.workers[2] = 4;
  shape.depths[1] = 2;
  int short_rounds = 0;
  const int rounds = std::getenv("ROUNDS") ? std::atoi(std::getenv("ROUNDS")) : 60;
  for (int round = 0; round < rounds; ++round) {
    std::vector<result> got;
    twin_pipeline<NullProfiler> p(shape, numbers<NullProfiler>{300}, fill<NullProfiler>{&o}, verify<NullProfiler>{&o},
                                  collect<NullProfiler>{&got});
    p.run_to_completion();
    if (got.size() != 300u) ++short_rounds;
    else check_results(got, 300);
  }
  CHECK(short_rounds == 0);
}

TEST_CASE("layout(): device stages and links, and where the backend runs enqueued work", "[device][pipeline]") {
  const auto l = twin_pipeline<NullProfiler>::layout(twin_pipeline<NullProfiler>::default_shape());
  REQUIRE(l.well_formed());
  CHECK(l.stages[1].device);  // fill and verify sit next to the device link
  CHECK(l.stages[2].device);
  CHECK_FALSE(l.stages[3].device);
  CHECK(l.links[1].kind == dflash::analysis::model_kind::device);
  CHECK(l.device_work_on_cpu);  // the host twin's streams are executor threads
  STATIC_REQUIRE(B::work_on_host_cores);
}
