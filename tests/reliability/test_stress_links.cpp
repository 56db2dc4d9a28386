// Randomized fault scenarios against the link kinds: device links on the
// asynchronous host twin (on one simulated device, or placed over several with
// and without peer access), queue links into an in_order stage (several source
// workers), queue links whose cheap stages their producers' threads call
// (help-first), a source those threads call themselves while its cost swings
// (source pull), direct-link segments, a profiled pipeline whose items carry
// flow stamps, and one bounded_queue whose waiters park and wake at random. Every
// scenario is drawn from (seed, index)
// and checks the promise users rely on: every item the source produced arrives
// exactly once and intact, or the run reports an error (the fault that fired)
// or was stopped on purpose — never a normal end with items missing, never a
// hang (a watchdog per scenario prints the replay line and every stack).
//
//   DFLASH_STRESS_SEED / _INDEX / _SECONDS: see stress_sweep.hpp.
#include <catch2/catch.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "stress_sweep.hpp"
#include "watchdog.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
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

// ---- what a scenario draws ---------------------------------------------------------
enum class fault { none, throw_in_call, throw_in_work, stop_from_sink, cancel_later, drain_later };

struct scenario {
  std::uint64_t seed, index;
  int items;  // < 0: endless (only with a stop)
  std::size_t w_source, w_mid, w_last, depth_in, depth_link, depth_out;
  fault f;
  int fault_at;     // item of the throw / stop
  int delay_us;     // stop() after this long
  int slow_every;   // every k-th item's work sleeps 0..slow_us
  int slow_us;
  int devices;      // simulated devices the device stages' workers spread over (placement family)
  bool peers;       // whether they may reach each other's memory (else the link copies into mirrors)
  std::uint64_t placement;  // bits that pick each worker's device

  std::string replay() const {
    return "DFLASH_STRESS_SEED=" + std::to_string(seed) + " DFLASH_STRESS_INDEX=" + std::to_string(index);
  }
};

const char* name_of(fault f) {
  switch (f) {
    case fault::none: return "none";
    case fault::throw_in_call: return "throw in a stage call";
    case fault::throw_in_work: return "throw in enqueued work";
    case fault::stop_from_sink: return "pipeline_stop from the sink";
    case fault::cancel_later: return "stop(cancel) from outside";
    case fault::drain_later: return "stop(drain) from outside";
  }
  return "?";
}

scenario draw(std::uint64_t seed, std::uint64_t index, bool device) {
  std::mt19937_64 r(seed * 0x9E3779B97F4A7C15ull + index);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); };
  scenario s{};
  s.seed = seed;
  s.index = index;
  const int fk = pick(0, 9);  // half the scenarios run clean: the "nothing missing" case matters most
  s.f = fk < 5 ? fault::none : static_cast<fault>(fk - 4);
  if (!device && s.f == fault::throw_in_work) s.f = fault::throw_in_call;
  const bool stops = s.f == fault::cancel_later || s.f == fault::drain_later;
  s.items = stops && pick(0, 1) ? -1 : pick(0, 300);
  s.w_source = static_cast<std::size_t>(pick(1, 3));
  s.w_mid = static_cast<std::size_t>(pick(1, 4));
  s.w_last = static_cast<std::size_t>(pick(1, 4));
  s.depth_in = static_cast<std::size_t>(pick(1, 8));
  s.depth_link = static_cast<std::size_t>(pick(1, 4));
  s.depth_out = static_cast<std::size_t>(pick(1, 8));
  s.fault_at = pick(0, s.items > 0 ? s.items : 300);
  s.delay_us = pick(0, 3000);
  s.slow_every = pick(0, 1) ? pick(1, 9) : 0;
  s.slow_us = pick(0, 300);
  s.devices = pick(1, 4);
  s.peers = pick(0, 1) == 1;
  s.placement = r();
  return s;
}

struct fault_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One run's observations; written from stage threads, read after join().
struct observed {
  std::mutex m;
  std::vector<int> seen;        // values the sink got
  std::atomic<int> produced{0};  // values the source handed out
  std::atomic<int> broken{0};    // items whose device data was not intact
  std::atomic<int> out_of_order{0};
  std::atomic<int> overlapped{0};  // calls that found their worker index already in a call
  std::atomic<int> index_reordered{0};  // a worker index got a source worker's older item after a newer one
  std::atomic<int> copies{0};           // slots the link copied to their consumer's device
  std::atomic<int> wrong_copies{0};     // copied where the consumer could reach the slot, or not where it could not
  int last = -1;
};

void maybe_sleep(const scenario& s, int x) {
  if (s.slow_every > 0 && x % s.slow_every == 0 && s.slow_us > 0)
    std::this_thread::sleep_for(std::chrono::microseconds(s.slow_us));
}

// ---- device links on the host twin: source -> q -> fill ═> verify -> q -> sink -------
constexpr std::size_t words = 64;
int pattern(int x, std::size_t i) { return x * 7919 + static_cast<int>(i); }

struct dslot : dflash::device_item<B> {
  int value = -1;
  int made_on = -1;     // the device of the stream that filled it
  bool copied = false;  // a mirror: the link copied the slot to the consumer's device
  dflash::device_buffer<int, B> data;
  // The consumer is on another device without peer access: the link copies the slot.
  void mirror_from(const dslot& src, const DS& ds) {
    value = src.value;
    made_on = src.made_on;
    copied = true;
    data.copy_from(src.data, ds);
  }
};
struct checked {
  int value;
  std::unique_ptr<std::atomic<int>> ok;  // written by the verifier's enqueued work
};

// Enqueues the work that writes item x into a slot (it may throw: the fault).
// Every kernel checks that the memory it touches is reachable from its stream's
// device (the twin's placement check): a slot read on the wrong device fails the run.
void write_item(const DS& ds, int* d, int x, const scenario& sc) {
  B* b = &ds.backend();
  const auto st = ds.native();
  ds.enqueue([d, x, &sc, b, st] {
    b->check_access(d, st);
    if (sc.f == fault::throw_in_work && x == sc.fault_at) throw fault_error("work failed at " + std::to_string(x));
    maybe_sleep(sc, x);
    for (std::size_t i = 0; i < words; ++i) d[i] = pattern(x, i);
  });
}

struct d_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  const scenario* s;
  observed* o;
  std::atomic<int>* next;
  std::optional<int> operator()() const {
    const int i = next->fetch_add(1);
    if (s->items >= 0 && i >= s->items) return std::nullopt;
    o->produced.fetch_add(1);
    return i;
  }
};
struct d_fill {
  static constexpr dflash::fixed_string name{"fill"};
  using input_type = int;
  using output_type = dslot;
  const scenario* s;
  void operator()(int&& x, dslot& out, const DS& ds) const {
    if (s->f == fault::throw_in_call && x == s->fault_at) throw fault_error("fill failed at " + std::to_string(x));
    out.value = x;
    out.made_on = ds.device();
    out.copied = false;
    write_item(ds, out.data.ensure(words, ds), x, *s);
  }
};
struct d_verify {
  static constexpr dflash::fixed_string name{"verify"};
  using input_type = dslot;
  using output_type = checked;
  const scenario* s = nullptr;  // placed: count the link's copies against what the devices need
  observed* o = nullptr;
  checked operator()(dslot& in, const DS& ds) const {
    if (o) {
      const bool needed = in.made_on != ds.device() && !s->peers;
      o->copies.fetch_add(in.copied ? 1 : 0);
      if (in.copied != needed) o->wrong_copies.fetch_add(1);
    }
    checked c{in.value, std::make_unique<std::atomic<int>>(-1)};
    const int* d = in.data.data();
    const int x = in.value;
    std::atomic<int>* ok = c.ok.get();
    B* b = &ds.backend();
    const auto st = ds.native();
    ds.enqueue([d, x, ok, b, st] {
      b->check_access(d, st);
      bool good = true;
      for (std::size_t i = 0; i < words; ++i) good = good && d[i] == pattern(x, i);
      ok->store(good ? 1 : 0);
    });
    return c;
  }
};
struct d_sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = checked;
  using output_type = void;
  const scenario* s;
  observed* o;
  void operator()(checked&& c) const {
    if (c.ok->load() != 1) o->broken.fetch_add(1);
    {
      const std::lock_guard lk(o->m);
      o->seen.push_back(c.value);
    }
    if (s->f == fault::stop_from_sink && c.value == s->fault_at) throw dflash::pipeline_stop{};
  }
};
template <class P>
using device_pipe_of = dflash::Pipeline<P, dflash::workers<d_source, 1>, dflash::queue_link<"in", 4>,
                                        dflash::workers<d_fill, 1>, dflash::device_link<"hs", 2>,
                                        dflash::workers<d_verify, 1>, dflash::queue_link<"out", 4>, d_sink>;
using device_pipe = device_pipe_of<NullProfiler>;
// Items carry flow stamps beside the device slot and in the host links' envelopes.
using flow_prof = dflash::AccumulatingProfiler<dflash::pipeline_keys<device_pipe>>;
static_assert(dflash::FlowPolicy<flow_prof>);
using flow_pipe = device_pipe_of<flow_prof>;

// A device source: several workers fill slots directly. Worker w > 0 quits
// early (once `next` passes its quota) and worker 0 runs to the end, so slots
// given back by the quitters are reused for real items. A quitter has already
// enqueued work on its slot (a late write of garbage) when it says so: the
// next producer of that slot must wait for it.
struct d_dev_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = dslot;
  const scenario* s;
  observed* o;
  std::atomic<int>* next;
  bool operator()(dslot& out, const DS& ds, std::size_t w) const {
    int* d = out.data.ensure(words, ds);
    const auto quit = [&] {
      ds.enqueue([d] {
        std::this_thread::sleep_for(200us);
        for (std::size_t i = 0; i < words; ++i) d[i] = -1;
      });
      return false;
    };
    const int quota = s->items < 0 ? 1 << 30 : s->items * static_cast<int>(w) / static_cast<int>(s->w_source + 1);
    if (w > 0 && next->load() >= quota) return quit();
    const int x = next->fetch_add(1);
    if (s->items >= 0 && x >= s->items) return quit();
    o->produced.fetch_add(1);
    if (s->f == fault::throw_in_call && x == s->fault_at) throw fault_error("source failed at " + std::to_string(x));
    out.value = x;
    write_item(ds, d, x, *s);
    return true;
  }
};
using device_source_pipe = dflash::Pipeline<NullProfiler, dflash::workers<d_dev_source, 1>, dflash::device_link<"hs", 2>,
                                            dflash::workers<d_verify, 1>, dflash::queue_link<"out", 4>, d_sink>;

// ---- queue links into in_order: sources -> q -> parallel -> q -> in_order sink ---------
struct h_mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  const scenario* s;
  int operator()(int&& x) const {
    if (s->f == fault::throw_in_call && x == s->fault_at) throw fault_error("mid failed at " + std::to_string(x));
    maybe_sleep(*s, x);
    return x;
  }
};
struct h_sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = int;
  using output_type = void;
  const scenario* s;
  observed* o;
  void operator()(int&& x) const {
    {
      const std::lock_guard lk(o->m);
      o->seen.push_back(x);
    }
    if (s->f == fault::stop_from_sink && x == s->fault_at) throw dflash::pipeline_stop{};
  }
};
using ordered_pipe = dflash::Pipeline<NullProfiler, dflash::workers<d_source, 1>, dflash::queue_link<"in", 4>,
                                      dflash::workers<h_mid, 1>, dflash::queue_link<"out", 4>,
                                      dflash::in_order<h_sink>>;
// One segment: the source, the parallel stage and the in_order sink on the same threads.
using direct_pipe = dflash::Pipeline<NullProfiler, d_source, dflash::direct_link<"take", 2>, dflash::workers<h_mid, 1>,
                                     dflash::direct_link<"reorder", 4>, dflash::in_order<h_sink>>;

// ---- help-first over queues: sources -> q -> indexed workers -> q -> in_order -> q -> one worker -> q -> sink ----
// Cheap host stages are called by their producers' threads (host_worker.hpp):
// a worker index still has one call at a time, the in_order stage delivers in
// order, and the one-worker stages after it keep that (FIFO) order.
constexpr int tracked_items = 1 << 16;  // items whose producer is noted (an endless run may make more)
// d_source, noting which of its workers made each item: one worker's items
// rise (they come from one counter), so each worker index must see them rise.
struct d_noting_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  d_source base;
  int* producer_of;  // read downstream after the queue's hand-over
  std::optional<int> operator()(std::size_t w) const {
    auto x = base();
    if (x && *x < tracked_items) producer_of[*x] = static_cast<int>(w);
    return x;
  }
};
// The same source, but its calls pace as the mid stage's do (slow_every /
// slow_us): the cost a pulled source samples swings between cheap and slow,
// so the calls move between the mid threads and the source's own threads.
struct d_paced_source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = int;
  d_noting_source base;
  std::optional<int> operator()(std::size_t w) const {
    auto x = base(w);
    if (x) maybe_sleep(*base.base.s, *x);
    return x;
  }
};
struct h_indexed_mid {
  static constexpr dflash::fixed_string name{"mid"};
  using input_type = int;
  using output_type = int;
  const scenario* s;
  observed* o;
  std::atomic<int>* busy;  // one flag per worker index
  const int* producer_of;
  int (*last)[3];          // per worker index and source worker: the latest item it got (under the index's busy flag)
  int operator()(int&& x, std::size_t w) const {
    if (busy[w].exchange(1, std::memory_order_acquire) != 0) o->overlapped.fetch_add(1);
    if (x < tracked_items) {  // FIFO per producer thread: each index gets each source worker's items in order
      int& l = last[w][producer_of[x]];
      if (x < l) o->index_reordered.fetch_add(1);
      l = x;
    }
    struct leave {
      std::atomic<int>& b;
      ~leave() { b.store(0, std::memory_order_release); }
    } l{busy[w]};
    return h_mid{s}(std::move(x));  // the same fault and pace as the queue-only family
  }
};
struct h_relay {
  static constexpr dflash::fixed_string name{"relay"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return x; }
};
struct h_pass {
  static constexpr dflash::fixed_string name{"pass"};
  using input_type = int;
  using output_type = int;
  int operator()(int&& x) const { return x; }
};
template <class Source>
using help_pipe_of = dflash::Pipeline<NullProfiler, dflash::workers<Source, 1>, dflash::queue_link<"in", 4>,
                                      dflash::workers<h_indexed_mid, 4>, dflash::queue_link<"mid", 4>,
                                      dflash::in_order<h_relay>, dflash::queue_link<"next", 4>, h_pass,
                                      dflash::queue_link<"out", 4>, h_sink>;
using help_pipe = help_pipe_of<d_noting_source>;
using pull_pipe = help_pipe_of<d_paced_source>;

// ---- running and judging one scenario --------------------------------------------------
struct outcome {
  bool threw = false;
  std::string what;
};

template <class Pipe>
outcome run(Pipe& p, const scenario& s) {
  outcome r;
  p.run();
  if (s.f == fault::cancel_later || s.f == fault::drain_later) {
    std::this_thread::sleep_for(std::chrono::microseconds(s.delay_us));
    p.stop(s.f == fault::drain_later ? dflash::stop_mode::drain : dflash::stop_mode::cancel);
  }
  try {
    p.join();
  } catch (const std::exception& e) {
    r.threw = true;
    r.what = e.what();
  } catch (...) {
    r.threw = true;
    r.what = "a non-std exception";
  }
  return r;
}

// The contract, per fault. Returns "" or what was broken.
std::string judge(const scenario& s, observed& o, const outcome& r, bool ordered) {
  const int produced = o.produced.load();
  std::vector<int> count(static_cast<std::size_t>(produced) + 1, 0);
  for (int v : o.seen) {
    if (v < 0 || v >= produced) return "the sink got item " + std::to_string(v) + ", never produced";
    if (++count[static_cast<std::size_t>(v)] > 1) return "item " + std::to_string(v) + " arrived twice";
  }
  if (o.broken.load()) return std::to_string(o.broken.load()) + " item(s) arrived with unwritten device data";
  if (ordered)
    for (std::size_t i = 0; i < o.seen.size(); ++i)
      if (o.seen[i] != static_cast<int>(i)) return "in_order sink got " + std::to_string(o.seen[i]) + " at position " + std::to_string(i);
  const bool fault_fired = (s.f == fault::throw_in_call || s.f == fault::throw_in_work) && s.fault_at < produced;
  if (r.threw && !fault_fired) return "join() threw without a fault: " + r.what;
  if (fault_fired && !r.threw)
    return "the fault at item " + std::to_string(s.fault_at) + " fired but join() reported nothing";
  if (r.threw && r.what.find("failed at " + std::to_string(s.fault_at)) == std::string::npos)
    return "join() threw something else than the fault: " + r.what;
  const bool complete_expected = s.f == fault::none || s.f == fault::drain_later ||
                                 (s.f == fault::stop_from_sink && s.fault_at >= produced) ||
                                 ((s.f == fault::throw_in_call || s.f == fault::throw_in_work) && !fault_fired);
  if (complete_expected && static_cast<int>(o.seen.size()) != produced)
    return "normal end with " + std::to_string(produced - static_cast<int>(o.seen.size())) + " of " +
           std::to_string(produced) + " item(s) missing";
  if (s.f == fault::none && s.items >= 0 && produced != s.items)
    return "the source produced " + std::to_string(produced) + " of " + std::to_string(s.items);
  return {};
}

using dflash_test::sweep;

std::string describe(const scenario& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "items %d, workers %zu/%zu/%zu, depths %zu/%zu/%zu, fault '%s' at %d, delay %d us, slow every %d by %d us, "
                "devices %d (peer access %s)",
                s.items, s.w_source, s.w_mid, s.w_last, s.depth_in, s.depth_link, s.depth_out, name_of(s.f), s.fault_at,
                s.delay_us, s.slow_every, s.slow_us, s.devices, s.peers ? "on" : "off");
  return buf;
}

// One scenario of a family: `make` builds the pipeline for it; `ordered`
// says whether the sink must see values in order; `also` judges what the
// family adds to the contract (after the pipeline is gone).
template <class Make, class Ordered, class Also>
std::string run_scenario(const char* family, std::uint64_t seed, std::uint64_t i, bool device, Make&& make,
                         Ordered&& ordered, Also&& also) {
  const scenario s = draw(seed, i, device);
  watchdog wd(std::string(family) + ", " + s.replay() + ": " + describe(s), 60s);
  observed o;
  std::atomic<int> next{0};
  outcome r;
  {
    const auto p = make(s, o, next);
    r = run(*p, s);
  }
  std::string err = judge(s, o, r, ordered(s));
  if (err.empty()) err = also(s, o);
  return err.empty() ? err : err + "\n  scenario: " + describe(s);
}

constexpr auto nothing_more = [](const scenario&, const observed&) { return std::string(); };
// Runs `family` under a time budget with `make` (see run_scenario).
template <class Make, class Ordered, class Also = decltype(nothing_more)>
void stress(const char* family, bool device, Make make, Ordered ordered, Also also = nothing_more) {
  sweep(family, [&](std::uint64_t seed, std::uint64_t i) {
    return run_scenario(family, seed, i, device, make, ordered, also);
  });
}
constexpr auto unordered = [](const scenario&) { return false; };

// Worker w's device: one of the scenario's devices, picked by its placement bits.
std::vector<int> place(const scenario& s, std::size_t workers, unsigned shift) {
  std::vector<int> d;
  for (std::size_t w = 0; w < workers; ++w)
    d.push_back(static_cast<int>((s.placement >> ((shift + 2 * w) % 62)) % static_cast<std::uint64_t>(s.devices)));
  return d;
}
// The device pipelines' shape for a scenario: its workers and depths.
template <class Pipe>
auto device_shape(const scenario& s) {
  auto shape = Pipe::default_shape();
  shape.workers = {s.w_source, s.w_mid, s.w_last, 1};
  shape.depths = {s.depth_in, s.depth_link, s.depth_out};
  return shape;
}

// ---- one bounded_queue: park / wake races ----------------------------------------
// Producers and consumers on one small queue, with random pauses that make one
// side outlast the other's spin (its waits yield, then park) or not (they end
// while spinning), blocking and timed calls mixed, and close() at a random
// moment or after the last push. Every item a push reported taken is popped
// exactly once and nothing else is; no waiter sleeps through its wake-up (the
// watchdog names the scenario).
struct queue_scenario {
  std::size_t capacity;
  int producers, consumers, per_producer;
  int pause_every, pause_us;  // every k-th call of a thread first sleeps 0..pause_us
  bool timed;                 // push_for / pop_for with short timeouts (retried) instead of push / pop
  int close_at_us;            // < 0: close after the last push; else close() this long after the start
};

queue_scenario draw_queue(std::uint64_t seed, std::uint64_t index) {
  std::mt19937_64 r(seed * 0x9E3779B97F4A7C15ull + index + 0x51ED);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(r); };
  queue_scenario q{};
  // Mostly short rings, where waits park; a quarter of the draws deeper ones (any size, most not
  // a power of two), where a push on a full ring spins for the slot a quarter of the ring ahead.
  q.capacity = static_cast<std::size_t>(pick(0, 3) == 0 ? pick(9, 300) : pick(1, 8));
  q.producers = pick(1, 4);
  q.consumers = pick(1, 4);
  q.per_producer = pick(0, 2000);
  q.pause_every = pick(0, 1) ? pick(1, 50) : 0;
  q.pause_us = pick(0, 200);
  q.timed = pick(0, 3) == 0;
  q.close_at_us = pick(0, 3) == 0 ? pick(0, 20000) : -1;
  return q;
}

std::string run_queue_scenario(std::uint64_t seed, std::uint64_t index) {
  const queue_scenario sc = draw_queue(seed, index);
  char what[256];
  std::snprintf(what, sizeof what,
                "capacity %zu, %d producers x %d items, %d consumers, pause every %d by <= %d us, %s, close %s %d us",
                sc.capacity, sc.producers, sc.per_producer, sc.consumers, sc.pause_every, sc.pause_us,
                sc.timed ? "timed calls" : "blocking calls", sc.close_at_us < 0 ? "after the last push" : "at",
                sc.close_at_us);
  watchdog wd(std::string("queue park/wake, DFLASH_STRESS_SEED=") + std::to_string(seed) +
                  " DFLASH_STRESS_INDEX=" + std::to_string(index) + ": " + what,
              60s);
  dflash::bounded_queue<int> q(sc.capacity);
  const std::size_t total = static_cast<std::size_t>(sc.producers) * static_cast<std::size_t>(sc.per_producer);
  std::vector<std::atomic<int>> pushed(total), popped(total);
  std::atomic<int> stray{0};
  // Each thread draws its pauses from its own stream: a replay makes the same choices.
  auto pauser = [&](int who) {
    return [&sc, r = std::mt19937_64(seed ^ (index << 8) ^ static_cast<std::uint64_t>(who)), n = 0]() mutable {
      if (sc.pause_every > 0 && ++n % sc.pause_every == 0)
        std::this_thread::sleep_for(std::chrono::microseconds(std::uniform_int_distribution<int>(0, sc.pause_us)(r)));
    };
  };
  std::vector<std::thread> consumers, producers;
  for (int c = 0; c < sc.consumers; ++c)
    consumers.emplace_back([&, c, pause = pauser(100 + c)]() mutable {
      for (;;) {
        pause();
        std::optional<int> v = sc.timed ? q.pop_for(std::chrono::microseconds(50 + 37 * c)) : q.pop();
        if (!v) {
          if (!sc.timed || (q.closed() && q.empty())) return;  // closed and drained
          continue;                                            // timed out
        }
        if (*v < 0 || static_cast<std::size_t>(*v) >= total) stray.fetch_add(1);
        else popped[static_cast<std::size_t>(*v)].fetch_add(1);
      }
    });
  for (int p = 0; p < sc.producers; ++p)
    producers.emplace_back([&, p, pause = pauser(p)]() mutable {
      for (int i = 0; i < sc.per_producer; ++i) {
        pause();
        const int v = p * sc.per_producer + i;
        dflash::queue_status st = dflash::queue_status::timeout;
        if (!sc.timed) st = q.push(v) ? dflash::queue_status::ok : dflash::queue_status::closed;
        while (sc.timed && st == dflash::queue_status::timeout) st = q.push_for(v, std::chrono::microseconds(40 + 29 * p));
        if (st != dflash::queue_status::ok) return;  // closed: this item and the rest were not taken
        pushed[static_cast<std::size_t>(v)].store(1);
      }
    });
  if (sc.close_at_us >= 0) {
    std::this_thread::sleep_for(std::chrono::microseconds(sc.close_at_us));
    q.close();
  }
  for (auto& t : producers) t.join();
  q.close();
  for (auto& t : consumers) t.join();
  int lost = 0, extra = 0;
  for (std::size_t k = 0; k < total; ++k) {
    lost += pushed[k].load() == 1 && popped[k].load() != 1;
    extra += pushed[k].load() == 0 && popped[k].load() != 0;
  }
  if (lost == 0 && extra == 0 && stray.load() == 0) return {};
  return std::to_string(lost) + " taken item(s) not popped exactly once, " + std::to_string(extra) +
         " popped without being taken, " + std::to_string(stray.load()) + " unknown value(s)\n  scenario: " + what;
}
}  // namespace

TEST_CASE("stress: device links on the host twin deliver every item once, or the run says why",
          "[stress][device]") {
  stress("device links", true, [](const scenario& s, observed& o, std::atomic<int>& next) {
    return std::make_unique<device_pipe>(device_shape<device_pipe>(s), d_source{&s, &o, &next}, d_fill{&s}, d_verify{}, d_sink{&s, &o});
  }, unordered);
}

// Placed over several simulated devices: every item once, and the link copies
// a slot exactly when its consumer cannot reach the producer's device.
template <class Pipe>
std::unique_ptr<Pipe> placed(const scenario& s, observed& o, std::atomic<int>& next) {
  auto shape = device_shape<Pipe>(s);
  shape.devices[1] = place(s, s.w_mid, 0);
  shape.devices[2] = place(s, s.w_last, 17);
  auto p = std::make_unique<Pipe>(shape, d_source{&s, &o, &next}, d_fill{&s}, d_verify{&s, &o}, d_sink{&s, &o});
  p->backend().simulate(s.devices, s.peers ? dflash::peer_access::all : dflash::peer_access::none);
  return p;
}
constexpr auto copies_as_needed = [](const scenario&, const observed& o) {
  if (o.wrong_copies.load() == 0) return std::string();
  return std::to_string(o.wrong_copies.load()) + " of the items reached their consumer copied when it could reach them, "
         "or not copied when it could not (" + std::to_string(o.copies.load()) + " copies)";
};
TEST_CASE("stress: device links placed over 1-4 simulated devices, with and without peer access",
          "[stress][device][placement]") {
  stress("placed device links", true, placed<device_pipe>, unordered, copies_as_needed);
}

// Stamps must survive every path an item takes, faults and stops included:
// each item the sink finished has exactly one end-to-end time, no age is
// negative, and nothing leaks (ASan) or races (TSan) on the stamp beside a slot.
TEST_CASE("stress: flow stamps over a device link: one end-to-end time per item the sink finished",
          "[stress][device][flow]") {
  std::unique_ptr<flow_prof> prof;
  std::chrono::steady_clock::time_point began;
  stress(
      "flow stamps", true,
      [&](const scenario& s, observed& o, std::atomic<int>& next) {
        prof = std::make_unique<flow_prof>();
        began = std::chrono::steady_clock::now();
        return std::make_unique<flow_pipe>(*prof, device_shape<flow_pipe>(s), d_source{&s, &o, &next}, d_fill{&s}, d_verify{},
                                           d_sink{&s, &o});
      },
      unordered,
      [&](const scenario& s, const observed& o) -> std::string {
        const auto snap = prof->snapshot();
        const auto count = [&](const char* key) { return static_cast<std::size_t>(snap.find(key)->count); };
        // the sink's call that threw pipeline_stop did not end: no end-to-end time for that item
        const bool stopped_in_sink =
            s.f == fault::stop_from_sink && std::find(o.seen.begin(), o.seen.end(), s.fault_at) != o.seen.end();
        const std::size_t finished = o.seen.size() - (stopped_in_sink && !o.seen.empty() ? 1 : 0);
        if (count("sink.e2e") != finished)
          return std::to_string(count("sink.e2e")) + " end-to-end times for " + std::to_string(finished) +
                 " items the sink finished";
        if (count("sink.age") < finished) return "fewer sink ages than items the sink finished";
        for (const char* k : {"fill.age_clock_backwards", "verify.age_clock_backwards", "sink.age_clock_backwards"})
          if (count(k) != 0) return std::string(k) + " counted items on a steady clock";
        // a stamp lost or mixed up on the way shows as an age longer than the run
        const auto lived = static_cast<std::uint64_t>(
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - began).count());
        for (const char* k : {"fill.age", "verify.age", "sink.age", "sink.e2e"})
          if (count(k) != 0 && snap.find(k)->max_ns > lived)
            return std::string(k) + " max " + std::to_string(snap.find(k)->max_ns) + " ns is longer than the run (" +
                   std::to_string(lived) + " ns)";
        return {};
      });
}

TEST_CASE("stress: device sources (several workers, exhausted with work enqueued) over a device link",
          "[stress][device]") {
  stress("device sources", true, [](const scenario& s, observed& o, std::atomic<int>& next) {
    auto shape = device_source_pipe::default_shape();
    shape.workers = {s.w_source + 1, s.w_last, 1};
    shape.depths = {s.depth_link, s.depth_out};
    return std::make_unique<device_source_pipe>(shape, d_dev_source{&s, &o, &next}, d_verify{}, d_sink{&s, &o});
  }, unordered);
}

// Several source workers number items in the order they leave the source,
// which need not be value order: then only exactly-once is checked.
TEST_CASE("stress: queue links into in_order, several source workers: every item once, in order", "[stress][in_order]") {
  stress("in_order over queues", false, [](const scenario& s, observed& o, std::atomic<int>& next) {
    auto shape = ordered_pipe::default_shape();
    shape.workers = {s.w_source, s.w_mid, 1};
    shape.depths = {s.depth_in, s.depth_out};
    return std::make_unique<ordered_pipe>(shape, d_source{&s, &o, &next}, h_mid{&s}, h_sink{&s, &o});
  }, [](const scenario& s) { return s.w_source == 1; });
}

TEST_CASE("stress: a direct-link segment into in_order delivers every item once, in order", "[stress][direct]") {
  stress("direct segment", false, [](const scenario& s, observed& o, std::atomic<int>& next) {
    auto shape = direct_pipe::default_shape();
    shape.workers = {1, s.w_mid, 1};
    shape.depths = {s.depth_in, s.depth_out};
    return std::make_unique<direct_pipe>(shape, d_source{&s, &o, &next}, h_mid{&s}, h_sink{&s, &o});
  }, [](const scenario&) { return true; });
}

// A family over help_pipe_of<Source>: every item once, in order through the
// in_order stage and the one-worker stages after it (one source worker), one
// call per worker index, and each worker index gets each source worker's items
// in order. Link 0's depth is drawn as `first_depth` (a pulled source's link:
// the short depth_link, where a pull matters most), link 1's as the other.
template <class Pipe, class MakeSource>
void indexed_family(const char* family, std::size_t source_workers_max, std::size_t scenario::*first_depth,
                    MakeSource make_source) {
  std::atomic<int> busy[4] = {0, 0, 0, 0};
  int last[4][3] = {};
  std::vector<int> producer_of(tracked_items);
  const auto sources = [source_workers_max](const scenario& s) { return std::min(s.w_source, source_workers_max); };
  stress(
      family, false,
      [&](const scenario& s, observed& o, std::atomic<int>& next) {
        for (auto& per_index : last)
          for (int& l : per_index) l = -1;
        auto shape = Pipe::default_shape();
        shape.workers = {sources(s), s.w_mid, 1, 1, 1};
        const bool link_first = first_depth == &scenario::depth_link;
        shape.depths = {s.*first_depth, link_first ? s.depth_in : s.depth_link, s.depth_link, s.depth_out};
        return std::make_unique<Pipe>(shape, make_source(d_noting_source{d_source{&s, &o, &next}, producer_of.data()}),
                                      h_indexed_mid{&s, &o, busy, producer_of.data(), last}, h_relay{}, h_pass{},
                                      h_sink{&s, &o});
      },
      [&](const scenario& s) { return sources(s) == 1; },
      [](const scenario&, const observed& o) {
        if (o.overlapped.load() != 0)
          return std::to_string(o.overlapped.load()) + " call(s) ran with a worker index already in a call";
        if (o.index_reordered.load() != 0)
          return std::to_string(o.index_reordered.load()) + " item(s) reached a worker index after a newer one";
        return std::string();
      });
}

// The source's and the stages' threads call the cheap stages after them help-first.
TEST_CASE("stress: help-first over queue links: every item once, in order, one call per worker index",
          "[stress][in_order][help]") {
  indexed_family<help_pipe>("help-first over queues", 3, &scenario::depth_in, [](d_noting_source src) { return src; });
}

// The mid stage's threads call the one-worker source when its link is empty
// and the source samples cheap (source pull), while its pace swings (a source
// with several workers is never pulled).
TEST_CASE("stress: a pulled source whose cost swings: every item once, in order, one call per worker index",
          "[stress][in_order][help][pull]") {
  indexed_family<pull_pipe>("pulled source", 1, &scenario::depth_link,
                            [](d_noting_source src) { return d_paced_source{src}; });
}

TEST_CASE("stress: one bounded_queue, waiters parking and waking at random: every taken item popped once",
          "[stress][queue]") {
  sweep("queue park/wake", run_queue_scenario);
}
