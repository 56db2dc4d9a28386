// Randomized backend failures: a device-link or device-queue pipeline on the
// asynchronous host twin, where one backend call made during the run fails
// (the n-th record, wait, copy, allocation or stream-ordered free: what a CUDA
// call returns when its device fails). Every scenario, drawn from (seed, index),
// checks what users rely on when the device fails under them:
//   * the run ends with that error named (join() throws it), or, when the call
//     that would fail was never made, ends normally with every item;
//   * nothing arrives twice, nothing arrives unwritten, nothing unknown arrives;
//   * every slot, buffer and event is given back (the backend's books balance
//     once the pipeline is gone; ASan sees the memory too);
//   * nothing hangs (a watchdog per scenario prints the replay line and every stack).
//
//   DFLASH_STRESS_SEED / _INDEX / _SECONDS: see stress_sweep.hpp;
//   DFLASH_STRESS_VERBOSE=1 prints each scenario before it runs.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/pipeline/links/device_queue.hpp>

#include "faulty_backend.hpp"
#include "numbers_source.hpp"
#include "stress_sweep.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using dflash::NullProfiler;
using dflash_test::backend_call;
using dflash_test::faults;
using FB = dflash_test::faulty_backend;
using FS = dflash::device_stream<FB>;

namespace {

// ---- what a scenario draws -----------------------------------------------------------
enum class pipe_kind { device_link, rows_partial, rows_full };

struct scenario {
  pipe_kind pipe;
  backend_call call;  // count: none fails
  int nth;
  int items;
  std::size_t w_fill, w_take, depth_in, depth_link, depth_out;
  int devices;  // device-link pipes: the fill and check workers spread over these simulated devices
  bool peers;
  std::uint64_t placement;
  int batch, bound;  // rows pipes: the shape's batch and MaxRowsPerPush
  int slow_us;       // enqueued work sleeps up to this long
};

scenario draw(std::uint64_t seed, std::uint64_t index) {
  std::mt19937_64 r(seed * 0x9E3779B97F4A7C15ull + index + 0xFA17);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); };
  scenario s{};
  s.pipe = static_cast<pipe_kind>(pick(0, 2));
  const int c = pick(0, 5);  // one in six runs clean: the books must balance there too
  s.call = c == 5 ? backend_call::count : static_cast<backend_call>(c);
  s.items = pick(0, 150);
  // Spread the failing call over the run: records and waits come a few per
  // item, copies about one per item, allocations and frees mostly early.
  switch (s.call) {
    case backend_call::record:
    case backend_call::wait: s.nth = pick(1, 3 * s.items + 6); break;
    case backend_call::copy: s.nth = pick(1, s.items + 6); break;
    case backend_call::allocate: s.nth = pick(1, 16); break;
    default: s.nth = pick(1, 6); break;
  }
  s.w_fill = static_cast<std::size_t>(pick(1, 3));
  s.w_take = static_cast<std::size_t>(pick(1, 3));
  s.depth_in = static_cast<std::size_t>(pick(1, 6));
  s.depth_link = static_cast<std::size_t>(pick(1, 4));
  s.depth_out = static_cast<std::size_t>(pick(1, 6));
  s.devices = pick(1, 3);
  s.peers = pick(0, 1) == 1;
  s.placement = r();
  s.batch = std::array{1, 5, 8}[static_cast<std::size_t>(pick(0, 2))];
  s.bound = pick(1, 8);
  s.slow_us = pick(0, 1) ? pick(0, 200) : 0;
  return s;
}

std::string describe(const scenario& s) {
  const char* pipes[] = {"device_link", "device_queue_link, partial batches", "device_queue_link, full batches"};
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "%s: call %d of '%s' fails; items %d, workers %zu/%zu, depths %zu/%zu/%zu, devices %d (peer access %s), "
                "batch %d, bound %d, slow %d us",
                pipes[static_cast<int>(s.pipe)], s.nth, dflash_test::name_of(s.call), s.items, s.w_fill, s.w_take,
                s.depth_in, s.depth_link, s.depth_out, s.devices, s.peers ? "on" : "off", s.batch, s.bound, s.slow_us);
  return buf;
}

void nap(const scenario& s, int x) {
  if (s.slow_us > 0) std::this_thread::sleep_for(std::chrono::microseconds((x * 37) % (s.slow_us + 1)));
}

// ---- a device link: numbers -> q -> fill ═> check -> q -> sink -------------------------
constexpr std::size_t words = 16;
int pattern(int x, std::size_t i) { return x * 7919 + static_cast<int>(i); }

struct fslot : dflash::device_item<FB> {
  int value = -1;
  dflash::device_buffer<int, FB> data;
  void mirror_from(const fslot& src, const FS& ds) {  // a consumer on a device it cannot reach
    value = src.value;
    data.copy_from(src.data, ds);
  }
};
struct checked {
  int value;
  std::unique_ptr<std::atomic<int>> ok;  // written by the check's enqueued work
};

struct observed {
  std::mutex m;
  std::vector<int> values;                  // device link: what the sink got
  std::vector<std::pair<int, int>> rows;    // rows: (call, row) in ring order per batch
  std::atomic<int> broken{0};
};

// Writes the first half of the slot, then copies it into the second half in
// stream order: the check finds both halves only if the link waited for both.
// Items differ in size, and fill workers sit on several devices, so slots grow
// and move (a stream-ordered free of the old block) during the run.
struct fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = fslot;
  const scenario* s;
  void operator()(int&& x, fslot& out, const FS& ds) const {
    out.value = x;
    const std::size_t half = words * (1 + static_cast<std::size_t>(x % 3));
    int* d = out.data.ensure(2 * half, ds);
    FB* b = &ds.backend();
    const auto st = ds.native();
    const scenario* sc = s;
    ds.enqueue([=] {
      b->check_access(d, st);
      nap(*sc, x);
      for (std::size_t i = 0; i < half; ++i) d[i] = pattern(x, i);
    });
    ds.copy(d + half, d, half * sizeof(int));
  }
};
struct check {
  static constexpr dflash::fixed_string name{"check"};
  using input_type = fslot;
  using output_type = checked;
  checked operator()(fslot& in, const FS& ds) const {
    checked c{in.value, std::make_unique<std::atomic<int>>(-1)};
    const int* d = in.data.data();
    const int x = in.value;
    const std::size_t half = in.data.size() / 2;
    std::atomic<int>* ok = c.ok.get();
    FB* b = &ds.backend();
    const auto st = ds.native();
    ds.enqueue([=] {
      b->check_access(d, st);
      bool good = half == words * (1 + static_cast<std::size_t>(x % 3));
      for (std::size_t i = 0; i < 2 * half; ++i) good = good && d[i] == pattern(x, i % half);
      ok->store(good ? 1 : 0);
    });
    return c;
  }
};
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = checked;
  using output_type = void;
  observed* o;
  void operator()(checked&& c) const {
    if (c.ok->load() != 1) o->broken.fetch_add(1);
    const std::lock_guard lk(o->m);
    o->values.push_back(c.value);
  }
};
using link_pipe = dflash::Pipeline<NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                                   dflash::workers<fill, 1>, dflash::device_link<"hs", 2>, dflash::workers<check, 1>,
                                   dflash::queue_link<"out", 4>, sink>;

// ---- a device queue: numbers -> q -> produce ═rows═> take ---------------------------------
struct row {
  int call, j;
};
using frows = dflash::device_rows<row, FB>;
int rows_of(const scenario& s, int x) { return (x * 13 + 5) % (s.bound + 1); }

struct produce {
  static constexpr dflash::fixed_string name{"produce"};
  using input_type = int;
  using output_type = frows;
  const scenario* s;
  void operator()(int&& x, frows& out, const FS& ds) const {
    const int n = rows_of(*s, x);
    const auto push = out.pusher();
    const scenario* sc = s;
    ds.enqueue([=] {
      nap(*sc, x);
      for (int j = 0; j < n; ++j)
        if (!push.push(row{x, j})) throw std::runtime_error("a push within the declared bound did not fit");
    });
  }
};
struct take {
  static constexpr dflash::fixed_string name{"take"};
  using input_type = frows;
  using output_type = void;
  observed* o;
  void operator()(frows& in, const FS& ds) const {
    const auto b = in.batch();
    observed* obs = o;
    ds.enqueue([=] {
      const std::lock_guard lk(obs->m);
      for (std::uint32_t i = 0; i < b.count(); ++i) obs->rows.emplace_back(b[i].call, b[i].j);
    });
  }
};
template <class Fill>
using rows_pipe = dflash::Pipeline<NullProfiler, dflash_test::numbers, dflash::queue_link<"in", 4>,
                                   dflash::workers<produce, 1>, dflash::device_queue_link<"rows", 64, 8, 8, Fill>,
                                   dflash::workers<take, 1>>;

// ---- running and judging ---------------------------------------------------------------
std::vector<int> place(const scenario& s, std::size_t workers, unsigned shift) {
  std::vector<int> d;
  for (std::size_t w = 0; w < workers; ++w)
    d.push_back(static_cast<int>((s.placement >> (shift + 2 * w)) % static_cast<std::uint64_t>(s.devices)));
  return d;
}

template <class Pipe>
std::unique_ptr<Pipe> make(const scenario& s, observed& o) {
  auto shape = Pipe::default_shape();
  if constexpr (std::is_same_v<Pipe, link_pipe>) {
    shape.workers = {1, s.w_fill, s.w_take, 1};
    shape.depths = {s.depth_in, s.depth_link, s.depth_out};
    shape.devices[1] = place(s, s.w_fill, 0);
    shape.devices[2] = place(s, s.w_take, 17);
    auto p = std::make_unique<Pipe>(shape, dflash_test::numbers{s.items}, fill{&s}, check{}, sink{&o});
    p->backend().simulate(s.devices, s.peers ? dflash::peer_access::all : dflash::peer_access::none);
    return p;
  } else {
    constexpr bool full = std::is_same_v<Pipe, rows_pipe<dflash::full_batches>>;
    shape.workers = {1, s.w_fill, s.w_take};
    const int least = std::max(2, full ? s.batch + s.bound - 1 : s.bound);
    shape.depths = {s.depth_in, static_cast<std::size_t>(least) + 3 * s.depth_link};
    shape.rows[1] = {static_cast<std::size_t>(s.bound), static_cast<std::size_t>(s.batch), 0};
    return std::make_unique<Pipe>(shape, dflash_test::numbers{s.items}, produce{&s}, take{&o});
  }
}

// What arrived against what was sent: "" or what broke.
std::string judge_arrivals(const scenario& s, const observed& o, bool complete) {
  if (s.pipe == pipe_kind::device_link) {
    std::vector<int> count(static_cast<std::size_t>(s.items), 0);
    for (int v : o.values) {
      if (v < 0 || v >= s.items) return "the sink got item " + std::to_string(v) + ", never sent";
      if (++count[static_cast<std::size_t>(v)] > 1) return "item " + std::to_string(v) + " arrived twice";
    }
    if (o.broken.load()) return std::to_string(o.broken.load()) + " item(s) arrived with unwritten device data";
    if (complete && o.values.size() != static_cast<std::size_t>(s.items))
      return "normal end with " + std::to_string(s.items - static_cast<int>(o.values.size())) + " of " +
             std::to_string(s.items) + " item(s) missing";
    return {};
  }
  std::map<std::pair<int, int>, int> once;
  for (const auto& rw : o.rows) {
    if (rw.first < 0 || rw.first >= s.items || rw.second < 0 || rw.second >= rows_of(s, rw.first))
      return "a row no call pushed: (" + std::to_string(rw.first) + ", " + std::to_string(rw.second) + ")";
    if (++once[rw] > 1) return "row (" + std::to_string(rw.first) + ", " + std::to_string(rw.second) + ") arrived twice";
  }
  long long expected = 0;
  for (int x = 0; x < s.items; ++x) expected += rows_of(s, x);
  if (complete && static_cast<long long>(once.size()) != expected)
    return "normal end with " + std::to_string(expected - static_cast<long long>(once.size())) + " of " +
           std::to_string(expected) + " row(s) missing";
  return {};
}

template <class Pipe>
std::string run_one(const scenario& s) {
  observed o;
  std::string thrown;
  {
    auto p = make<Pipe>(s, o);
    faults().armed = true;
    try {
      p->run();
      p->join();
    } catch (const std::exception& e) {
      thrown = e.what();
    }
    faults().armed = false;
  }
  const bool fired = faults().fired.load();
  if (!thrown.empty() && !fired) return "the run failed without a failing call: " + thrown;
  if (fired && thrown.empty()) return "'" + faults().message() + "' happened and the run ended normally";
  if (fired && thrown.find(faults().message()) == std::string::npos)
    return "the run failed with something else than the failing call: " + thrown;
  if (std::string bad = judge_arrivals(s, o, !fired); !bad.empty()) return bad;
  if (faults().leaked_allocations != 0)
    return std::to_string(faults().leaked_allocations) + " device allocation(s) never given back";
  if (faults().leaked_events != 0) return std::to_string(faults().leaked_events) + " event(s) never destroyed";
  return {};
}

// Scenarios per failing call, and how many fired (a call drawn past the run's last never does).
struct tally {
  std::array<int, static_cast<std::size_t>(backend_call::count) + 1> drawn{}, fired{};
};

std::string one(std::uint64_t seed, std::uint64_t index, tally& t) {
  const scenario s = draw(seed, index);
  const std::string what = describe(s);
  if (dflash_test::env_u64("DFLASH_STRESS_VERBOSE", 0))  // a crash (ASan) prints no replay line: this one is first
    std::fprintf(stderr, "backend faults %llu: %s\n", static_cast<unsigned long long>(index), what.c_str());
  watchdog wd("backend faults, DFLASH_STRESS_SEED=" + std::to_string(seed) + " DFLASH_STRESS_INDEX=" +
                  std::to_string(index) + ": " + what,
              60s);
  faults().reset(s.call, s.nth);
  std::string err;
  switch (s.pipe) {
    case pipe_kind::device_link: err = run_one<link_pipe>(s); break;
    case pipe_kind::rows_partial: err = run_one<rows_pipe<dflash::partial_batches>>(s); break;
    case pipe_kind::rows_full: err = run_one<rows_pipe<dflash::full_batches>>(s); break;
  }
  ++t.drawn[static_cast<std::size_t>(s.call)];
  t.fired[static_cast<std::size_t>(s.call)] += faults().fired.load() ? 1 : 0;
  return err.empty() ? err : err + "\n  scenario: " + what;
}

}  // namespace

TEST_CASE("stress: a backend call that fails mid-run is reported, loses nothing silently and leaks nothing",
          "[stress][device][faults]") {
  tally t;
  dflash_test::sweep("backend faults", [&](std::uint64_t seed, std::uint64_t i) { return one(seed, i, t); });
  for (std::size_t c = 0; c <= static_cast<std::size_t>(backend_call::count); ++c)
    std::printf("  %-8s %d scenarios, the call failed in %d\n", dflash_test::name_of(static_cast<backend_call>(c)),
                t.drawn[c], t.fired[c]);
}

// The first allocation of a run is a device queue's record for a producer
// call (its count word): failing it must give back the event made before it.
TEST_CASE("device_queue_link: an allocation that fails while a call's record is made gives back its event",
          "[device][faults]") {
  scenario s = draw(1, 0);
  s.pipe = pipe_kind::rows_partial;
  s.call = backend_call::allocate;
  s.nth = 1;
  s.items = 20;
  s.w_fill = 2;
  s.w_take = 2;
  s.batch = 5;
  s.bound = 4;
  watchdog wd("a failing allocation in a device queue");
  faults().reset(s.call, s.nth);
  CHECK(run_one<rows_pipe<dflash::partial_batches>>(s) == "");
  CHECK(faults().fired.load());
}
