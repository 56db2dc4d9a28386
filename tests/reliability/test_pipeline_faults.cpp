// Fault tests for dflash::Pipeline: a stage that throws at a
// random step, a consumer that stops early, stop() under full queues, the
// destructor of a running pipeline, and the join()/run() lifecycle. Every case
// ends with: every stage thread exited (a thread_local mark per stage thread),
// every stage object and every item destroyed (counters; items own heap memory
// so a leak is also an ASan report), the error reported exactly, and — with
// AccumulatingProfiler — profile counts that agree with what the stages saw.
// A watchdog aborts the process if a case hangs, so CI fails instead of stalling.
// Catch assertions run on the main thread only; stages record into atomics.
#include <catch2/catch.hpp>
#include <dflash/pipeline.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

using namespace std::chrono_literals;

namespace {


template <class Pred>
void wait_until(Pred pred) {
  while (!pred()) std::this_thread::sleep_for(100us);  // bounded by the watchdog
}

// ---- instrumentation ---------------------------------------------------------

// Counts live objects of a kind: every construction +1, every destruction -1
// (moved-from objects count until destroyed).
class counted {
 public:
  explicit counted(std::atomic<int>* n) noexcept : n_(n) { n_->fetch_add(1, std::memory_order_relaxed); }
  counted(const counted& o) noexcept : n_(o.n_) { n_->fetch_add(1, std::memory_order_relaxed); }
  counted& operator=(const counted& o) noexcept {
    if (n_ != o.n_) {
      n_->fetch_sub(1, std::memory_order_relaxed);
      n_ = o.n_;
      n_->fetch_add(1, std::memory_order_relaxed);
    }
    return *this;
  }
  ~counted() { n_->fetch_sub(1, std::memory_order_relaxed); }

 private:
  std::atomic<int>* n_;
};

struct item {
  int id = 0;
  std::vector<int> payload;  // heap memory: an item never destroyed is an ASan leak
  counted life;
};

enum class fault_kind { runtime, logic, custom, stop };
const char* kind_name(fault_kind k) {
  switch (k) {
    case fault_kind::runtime: return "std::runtime_error";
    case fault_kind::logic: return "std::logic_error";
    case fault_kind::custom: return "custom_fault";
    case fault_kind::stop: return "dflash::pipeline_stop";
  }
  return "?";
}

struct custom_fault : std::runtime_error {  // a derived type must not be sliced
  custom_fault(const std::string& m, int s) : std::runtime_error(m), seed(s) {}
  int seed;
};

constexpr int n_stages = 4;  // source, a, b, sink

struct stage_stats {
  std::atomic<int> calls{0};         ///< calls started
  std::atomic<int> returned{0};      ///< calls that returned normally
  std::atomic<int> after_cancel{0};  ///< calls that started when the pipeline was already cancelled
  std::atomic<int> threads{0};       ///< distinct threads that ran this stage
};

// Everything one pipeline run shares with its stages.
struct env {
  std::atomic<int> threads{0};  ///< stage threads alive (registered on first call, removed at thread exit)
  std::atomic<int> objects{0};  ///< live stage objects
  std::atomic<int> items{0};    ///< live items
  std::function<bool()> cancelled = [] { return false; };  ///< the pipeline's cancelled(), set before run()
  std::array<stage_stats, n_stages> st;

  // The fault: stage `fault_stage` throws on its `fault_at`-th call (0-based, over all its workers).
  int fault_stage = -1;
  int fault_at = 0;
  fault_kind kind = fault_kind::runtime;
  std::string message;
  int seed = 0;
  std::atomic<int> thrown{0};
  int thrown_item = -1;  // written by the throwing thread, read after join()

  int source_limit = -1;        ///< source items (-1: endless)
  std::function<void(int)> on_sink;  ///< called by the sink with its call number (gates, stop())

  std::mutex sunk_m;
  std::vector<int> sunk;  ///< ids the sink consumed, in call order
};

// A thread_local mark whose destructor runs when the stage thread exits:
// env::threads is back to 0 only once every stage thread has finished.
void register_thread(env& e, int stage) {
  struct mark {
    std::atomic<int>* n = nullptr;
    ~mark() {
      if (n) n->fetch_sub(1, std::memory_order_acq_rel);
    }
  };
  thread_local mark m;
  if (m.n == nullptr) {
    m.n = &e.threads;
    e.threads.fetch_add(1, std::memory_order_acq_rel);
    e.st[static_cast<std::size_t>(stage)].threads.fetch_add(1, std::memory_order_relaxed);
  }
}

// What every stage does at the start of a call; returns the call number.
int enter(env& e, int stage, int id) {
  register_thread(e, stage);
  auto& s = e.st[static_cast<std::size_t>(stage)];
  if (e.cancelled()) s.after_cancel.fetch_add(1, std::memory_order_relaxed);
  const int n = s.calls.fetch_add(1, std::memory_order_relaxed);
  if (stage == e.fault_stage && n == e.fault_at) {
    e.thrown_item = id < 0 ? n : id;
    e.thrown.fetch_add(1, std::memory_order_relaxed);
    switch (e.kind) {
      case fault_kind::runtime: throw std::runtime_error(e.message);
      case fault_kind::logic: throw std::logic_error(e.message);
      case fault_kind::custom: throw custom_fault(e.message, e.seed);
      case fault_kind::stop: throw dflash::pipeline_stop{};
    }
  }
  if (n % 7 == 3) std::this_thread::yield();  // vary the interleavings a little
  return n;
}
void leave(env& e, int stage) {
  e.st[static_cast<std::size_t>(stage)].returned.fetch_add(1, std::memory_order_relaxed);
}

// ---- stages ----------------------------------------------------------------
template <class P>
struct source {
  static constexpr dflash::fixed_string name{"source"};
  using input_type = void;
  using output_type = item;
  env* e;
  counted life{&e->objects};
  std::optional<item> operator()() {
    if (e->source_limit >= 0 && e->st[0].calls.load(std::memory_order_relaxed) >= e->source_limit)
      return std::nullopt;  // single worker: no race on the limit
    const int n = enter(*e, 0, -1);
    item x{n, std::vector<int>(8, n), counted{&e->items}};
    leave(*e, 0);
    return x;
  }
};

template <class P, int Index, dflash::fixed_string Name>
struct relay {
  static constexpr dflash::fixed_string name = Name;
  using input_type = item;
  using output_type = item;
  env* e;
  counted life{&e->objects};
  item operator()(item&& x) {
    enter(*e, Index, x.id);
    x.payload.push_back(Index);
    leave(*e, Index);
    return std::move(x);
  }
};
template <class P>
using stage_a = relay<P, 1, "a">;
template <class P>
using stage_b = relay<P, 2, "b">;
// The same relays called only by their own threads (no help-first), so that
// a slow sink fills every queue and blocks every producer in its push.
template <class P, int Index, dflash::fixed_string Name>
struct pinned_relay : relay<P, Index, Name> {
  static constexpr bool own_threads_only = true;
};

template <class P>
struct sink {
  static constexpr dflash::fixed_string name{"sink"};
  using input_type = item;
  using output_type = void;
  env* e;
  counted life{&e->objects};
  void operator()(item&& x) {
    const int n = enter(*e, 3, x.id);
    if (e->on_sink) e->on_sink(n);
    {
      std::lock_guard lk(e->sunk_m);
      e->sunk.push_back(x.id);
    }
    leave(*e, 3);
  }
};

constexpr std::size_t q0_depth = 3, q1_depth = 2, q2_depth = 4;

template <class P, std::size_t A, std::size_t B, std::size_t K, bool Pinned = false>
using fault_pipeline = dflash::Pipeline<
    P, source<P>, dflash::queue_link<"q0", q0_depth>,
    dflash::workers<std::conditional_t<Pinned, pinned_relay<P, 1, "a">, stage_a<P>>, A>,
    dflash::queue_link<"q1", q1_depth>,
    dflash::workers<std::conditional_t<Pinned, pinned_relay<P, 2, "b">, stage_b<P>>, B>,
    dflash::queue_link<"q2", q2_depth>, dflash::workers<sink<P>, K>>;
template <class P>
using keys_pipeline = fault_pipeline<P, 1, 1, 1>;  // keys do not depend on worker counts
using profiler = dflash::AccumulatingProfiler<dflash::pipeline_keys<keys_pipeline<dflash::NullProfiler>>>;

template <class P, std::size_t A, std::size_t B, std::size_t K>
using shape_of = typename fault_pipeline<P, A, B, K>::shape_type;

// Compile-time sizes (workers<S, N>, queue_link depth), or a runtime shape.
template <class P, std::size_t A, std::size_t B, std::size_t K, bool Pinned = false>
std::unique_ptr<fault_pipeline<P, A, B, K, Pinned>> make_pipeline(env& e, const P& prof,
                                                                  const shape_of<P, A, B, K>* shape = nullptr) {
  using pipe = fault_pipeline<P, A, B, K, Pinned>;
  using a = typename pipe::template stage_type<1>;
  using b = typename pipe::template stage_type<2>;
  auto p = shape ? std::make_unique<pipe>(prof, *shape, source<P>{&e}, a{{&e}}, b{{&e}}, sink<P>{&e})
                 : std::make_unique<pipe>(prof, source<P>{&e}, a{{&e}}, b{{&e}}, sink<P>{&e});
  e.cancelled = [raw = p.get()] { return raw->cancelled(); };
  return p;
}

// ---- checks (main thread, after join) ----------------------------------------

// Per-stage profile counts agree with the stages' own counters: "<stage>.work"
// = calls started; every push and pop is one "<queue>.push_wait"/"pop_wait"
// record and one "<stage>.wait" record of the stage that made it.
void check_profile(const profiler& prof, env& e, std::array<std::size_t, n_stages> workers) {
  const auto s = prof.snapshot();
  auto count = [&](const char* k) -> std::int64_t {
    const auto* r = s.find(k);
    REQUIRE(r != nullptr);
    return static_cast<std::int64_t>(r->count);
  };
  auto calls = [&](int i) { return static_cast<std::int64_t>(e.st[static_cast<std::size_t>(i)].calls.load()); };
  auto returned = [&](int i) { return static_cast<std::int64_t>(e.st[static_cast<std::size_t>(i)].returned.load()); };
  CHECK(count("source.work") == calls(0) + (e.source_limit >= 0 ? 1 : 0));  // + the call that said "done"
  CHECK(count("a.work") == calls(1));
  CHECK(count("b.work") == calls(2));
  CHECK(count("sink.work") == calls(3));
  // A stage pushes exactly the items its calls returned.
  CHECK(count("source.wait") == returned(0));
  CHECK(count("q0.push_wait") == returned(0));
  CHECK(count("q1.push_wait") == returned(1));
  CHECK(count("q2.push_wait") == returned(2));
  // wait = pops + pushes of that stage.
  CHECK(count("a.wait") == count("q0.pop_wait") + count("q1.push_wait"));
  CHECK(count("b.wait") == count("q1.pop_wait") + count("q2.push_wait"));
  CHECK(count("sink.wait") == count("q2.pop_wait"));
  // Every call is preceded by one pop; each worker makes at most one pop that leads to no call.
  const char* pops[] = {"q0.pop_wait", "q1.pop_wait", "q2.pop_wait"};
  for (int i = 1; i < n_stages; ++i) {
    INFO("stage " << i);
    CHECK(count(pops[i - 1]) >= calls(i));
    CHECK(count(pops[i - 1]) <= calls(i) + static_cast<std::int64_t>(workers[static_cast<std::size_t>(i)]));
  }
}

// join() rethrows exactly what the stage threw (type not sliced, message kept),
// or returns normally for pipeline_stop.
template <class Pipe>
void check_join_reports(Pipe& p, const env& e) {
  std::exception_ptr err;
  try {
    p.join();
  } catch (...) {
    err = std::current_exception();
  }
  if (e.kind == fault_kind::stop) {
    CHECK_FALSE(err);
    return;
  }
  REQUIRE(err);
  try {
    std::rethrow_exception(err);
  } catch (const custom_fault& x) {
    CHECK(e.kind == fault_kind::custom);
    CHECK(x.seed == e.seed);
    CHECK(std::string(x.what()) == e.message);
  } catch (const std::logic_error& x) {
    CHECK(e.kind == fault_kind::logic);
    CHECK(typeid(x) == typeid(std::logic_error));
    CHECK(std::string(x.what()) == e.message);
  } catch (const std::runtime_error& x) {
    CHECK(e.kind == fault_kind::runtime);
    CHECK(typeid(x) == typeid(std::runtime_error));
    CHECK(std::string(x.what()) == e.message);
  } catch (...) {
    FAIL("join() rethrew an exception of an unexpected type");
  }
}

// After the pipeline object is gone: no stage object, item or thread is left.
void check_all_released(const env& e) {
  CHECK(e.threads.load() == 0);
  CHECK(e.objects.load() == 0);
  CHECK(e.items.load() == 0);
}

template <class P, std::size_t A, std::size_t B, std::size_t K>
void run_fault_case(env& e, const P& prof, const shape_of<P, A, B, K>* shape = nullptr) {
  std::array<std::size_t, n_stages> workers{1, A, B, K};
  if (shape) workers = shape->workers;
  const bool one_each = workers == std::array<std::size_t, n_stages>{1, 1, 1, 1};
  {
    auto p = make_pipeline<P, A, B, K>(e, prof, shape);
    CHECK(p->shape().workers == workers);
    p->run();
    check_join_reports(*p, e);
    CHECK(e.threads.load() == 0);  // join() returned: every stage thread has exited
    CHECK(p->cancelled());
    CHECK(e.thrown.load() == 1);  // the faulting call ran exactly once

    // After the pipeline was cancelled, each thread starts at most the one call
    // it had already committed to (it checked cancelled() just before): a
    // stage's own threads, and for the source also stage a's, which call a
    // cheap source themselves (source pull). A thread counts under the first
    // stage it calls, so a thread of stage a may count under the source. No
    // more threads ran than the shape starts.
    int threads = 0, started = 0;
    for (int i = 0; i < n_stages; ++i) {
      INFO("stage " << i);
      const auto w = static_cast<int>(workers[static_cast<std::size_t>(i)]);
      const int callers = w + (i == 0 ? static_cast<int>(workers[1]) : 0);
      CHECK(e.st[static_cast<std::size_t>(i)].after_cancel.load() <= callers);
      CHECK(e.st[static_cast<std::size_t>(i)].threads.load() <= callers);
      threads += e.st[static_cast<std::size_t>(i)].threads.load();
      started += w;
    }
    CHECK(threads <= started);
    // Items only flow forward: every consumed id was produced, once; the item a
    // source or relay failed on never reaches the sink.
    const std::set<int> ids(e.sunk.begin(), e.sunk.end());
    CHECK(ids.size() == e.sunk.size());
    if (!ids.empty()) CHECK(*ids.rbegin() < e.st[0].returned.load());
    if (e.fault_stage == 0) CHECK(e.st[0].returned.load() == e.fault_at);
    if (e.fault_stage == 1 || e.fault_stage == 2) CHECK(ids.count(e.thrown_item) == 0);
    if (e.fault_stage == 3) CHECK(ids.count(e.thrown_item) == 0);
    // One worker everywhere: FIFO end to end, so the sink saw exactly 0, 1, ..., m-1.
    if (one_each)
      for (std::size_t i = 0; i < e.sunk.size(); ++i) CHECK(e.sunk[i] == static_cast<int>(i));
    if constexpr (P::enabled) check_profile(prof, e, workers);
  }
  check_all_released(e);
}

template <class P>
void run_seed(int seed) {
  std::mt19937 rng(static_cast<std::mt19937::result_type>(seed));
  env e;
  e.seed = seed;
  // Seeds 0..15 cover every (stage, compile-time worker layout) pair; later
  // seeds draw the stage and a runtime shape: 1..4 workers per relay and sink,
  // queue depths 1..5 (the source keeps one worker: its call number is the item id).
  e.fault_stage = seed < 16 ? seed % n_stages : static_cast<int>(rng() % n_stages);
  const int layout = seed < 16 ? seed / n_stages : 4;
  e.fault_at = std::uniform_int_distribution<int>(0, 150)(rng);
  e.kind = static_cast<fault_kind>(rng() % 4);
  e.message = "fault seed " + std::to_string(seed) + " stage " + std::to_string(e.fault_stage) + " call " +
              std::to_string(e.fault_at);
  INFO("seed " << seed << ": stage " << e.fault_stage << " throws " << kind_name(e.kind) << " at call " << e.fault_at
               << ", layout " << layout);
  watchdog wd("random fault, seed " + std::to_string(seed));
  P prof;
  switch (layout) {
    case 0: run_fault_case<P, 1, 1, 1>(e, prof); break;
    case 1: run_fault_case<P, 2, 3, 1>(e, prof); break;
    case 2: run_fault_case<P, 4, 1, 2>(e, prof); break;
    case 3: run_fault_case<P, 3, 2, 3>(e, prof); break;
    default: {
      auto shape = keys_pipeline<P>::default_shape();
      for (std::size_t i = 1; i < shape.workers.size(); ++i) shape.workers[i] = 1 + rng() % 4;
      for (auto& d : shape.depths) d = 1 + rng() % 5;
      INFO("runtime shape: workers 1/" << shape.workers[1] << "/" << shape.workers[2] << "/" << shape.workers[3]
                                       << ", depths " << shape.depths[0] << "/" << shape.depths[1] << "/"
                                       << shape.depths[2]);
      run_fault_case<P, 1, 1, 1>(e, prof, &shape);
      break;
    }
  }
}

}  // namespace

TEST_CASE("a stage that throws at a random step: join() rethrows it and every thread ends", "[fault]") {
  for (int seed = 0; seed < 20; ++seed) run_seed<profiler>(seed);
}

TEST_CASE("the same faults with NullProfiler", "[fault]") {
  for (int seed : {0, 5, 10, 15, 16, 17}) run_seed<dflash::NullProfiler>(seed);
}

// ---- a consumer that stops early ----------------------------------------------

TEST_CASE("a sink that throws pipeline_stop after k items ends an endless pipeline cleanly", "[fault][stop]") {
  for (const int k : {0, 1, 17}) {
    INFO("k = " << k);
    watchdog wd("pipeline_stop from the sink, k = " + std::to_string(k));
    env e;
    e.fault_stage = 3;
    e.fault_at = k;
    e.kind = fault_kind::stop;
    profiler prof;
    {
      auto p = make_pipeline<profiler, 1, 1, 1>(e, prof);
      p->run();
      CHECK_NOTHROW(p->join());
      CHECK(p->cancelled());
      CHECK(e.threads.load() == 0);
      // One sink worker: it is never called again after the call that stopped.
      CHECK(e.st[3].calls.load() == k + 1);
      CHECK(e.st[3].returned.load() == k);
      REQUIRE(e.sunk.size() == static_cast<std::size_t>(k));
      for (int i = 0; i < k; ++i) CHECK(e.sunk[static_cast<std::size_t>(i)] == i);
      check_profile(prof, e, {1, 1, 1, 1});
    }
    check_all_released(e);
  }
}

// The race behind the promise above: the sink's seat (help-first) must not go
// before the run is cancelled, or stage 2's thread takes it and calls the sink
// again. Rare per run (about 1 in 150 runs of a fresh process, fewer in a warm one), so repeated.
TEST_CASE("a one-worker stage whose call threw pipeline_stop is never called again, repeated", "[fault][stop]") {
  watchdog wd("pipeline_stop from the sink, repeated");
  // Bounded by rounds and by time: a sanitizer build runs a round ten times slower, and the
  // watchdog must still only ever fire on a hang.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  int round = 0;
  for (; round < 3000 && (round < 100 || std::chrono::steady_clock::now() < deadline); ++round) {
    env e;
    e.fault_stage = 3;
    e.fault_at = 1;
    e.kind = fault_kind::stop;
    profiler prof;
    {
      auto p = make_pipeline<profiler, 1, 1, 1>(e, prof);
      p->run();
      p->join();
    }
    if (e.st[3].calls.load() != 2) FAIL("round " << round << ": the sink was called " << e.st[3].calls.load() << " times");
  }
  INFO("rounds run: " << round);
  CHECK(round >= 100);
}

TEST_CASE("pipeline_stop from a middle stage with several workers ends the pipeline cleanly", "[fault][stop]") {
  watchdog wd("pipeline_stop from a relay");
  env e;
  e.fault_stage = 2;
  e.fault_at = 40;
  e.kind = fault_kind::stop;
  profiler prof;
  {
    auto p = make_pipeline<profiler, 2, 3, 2>(e, prof);
    p->run();
    CHECK_NOTHROW(p->join());
    CHECK(p->cancelled());
    CHECK(e.threads.load() == 0);
    CHECK(e.st[2].calls.load() >= 41);
    CHECK(e.st[2].after_cancel.load() <= 3);
    check_profile(prof, e, {1, 2, 3, 2});
  }
  check_all_released(e);
}

TEST_CASE("a sink that calls stop() on its own pipeline gets no further item", "[fault][stop]") {
  watchdog wd("stop() from inside the sink");
  env e;
  constexpr int k = 9;
  profiler prof;
  {
    auto p = make_pipeline<profiler, 1, 1, 1>(e, prof);
    e.on_sink = [raw = p.get()](int n) {
      if (n == k) raw->stop();  // non-blocking: safe from a stage thread
    };
    p->run();
    CHECK_NOTHROW(p->join());
    CHECK(p->cancelled());
    CHECK(e.threads.load() == 0);
    CHECK(e.st[3].calls.load() == k + 1);  // the stopping call completes; none after it
    CHECK(e.sunk.size() == static_cast<std::size_t>(k + 1));
    check_profile(prof, e, {1, 1, 1, 1});
  }
  check_all_released(e);
}

// ---- stop() while every queue is full --------------------------------------

namespace {
// Holds the sink inside its first call until opened.
struct gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  std::atomic<bool> entered{false};
  void pass() {
    entered.store(true);
    std::unique_lock lk(m);
    cv.wait(lk, [this] { return open; });
  }
  void release() {
    {
      std::lock_guard lk(m);
      open = true;
    }
    cv.notify_all();
  }
};

// Source -> a x2 -> b -> sink (held in its first call): every queue fills and
// every producer blocks in push. Items in flight at that point: one in the
// source's push, q0, two in a's hands, q1, one in b's, q2, one in the sink.
constexpr int items_when_full = 1 + static_cast<int>(q0_depth) + 2 + static_cast<int>(q1_depth) + 1 +
                                static_cast<int>(q2_depth) + 1;

template <class Pipe>
void wait_all_full(Pipe& p, gate& g) {
  wait_until([&] {
    return g.entered.load() && p.template link<0>().size() == q0_depth && p.template link<1>().size() == q1_depth &&
           p.template link<2>().size() == q2_depth && p.template link<0>().blocked_pushers() == 1 &&
           p.template link<1>().blocked_pushers() == 2 && p.template link<2>().blocked_pushers() == 1;
  });
}
}  // namespace

TEST_CASE("stop() with every queue full wakes every blocked producer; queued items are freed", "[fault][stop]") {
  watchdog wd("stop() under full queues");
  env e;
  gate g;
  e.on_sink = [&g](int n) {
    if (n == 0) g.pass();
  };
  profiler prof;
  {
    auto p = make_pipeline<profiler, 2, 1, 1, true>(e, prof);
    p->run();
    wait_all_full(*p, g);
    CHECK(e.st[0].returned.load() == items_when_full);
    p->stop();
    // Every blocked producer exits without the sink's help: only the sink's thread is left.
    wait_until([&] { return e.threads.load() == 1; });
    CHECK(p->link<0>().blocked_pushers() == 0);
    CHECK(p->link<1>().blocked_pushers() == 0);
    CHECK(p->link<2>().blocked_pushers() == 0);
    g.release();
    CHECK_NOTHROW(p->join());
    CHECK(e.threads.load() == 0);
    CHECK(e.st[0].calls.load() == items_when_full);  // the failed push ended the source
    CHECK(e.st[3].calls.load() == 1);                // cancelled: the queued items never reach the sink
    CHECK(e.sunk.size() == 1);
    CHECK(e.items.load() > 0);  // still queued, owned by the pipeline until it is destroyed
    check_profile(prof, e, {1, 2, 1, 1});
  }
  check_all_released(e);
}

TEST_CASE("stop(drain) with every queue full delivers every produced item", "[fault][stop]") {
  watchdog wd("stop(drain) under full queues");
  env e;
  gate g;
  e.on_sink = [&g](int n) {
    if (n == 0) g.pass();
  };
  profiler prof;
  {
    auto p = make_pipeline<profiler, 2, 1, 1, true>(e, prof);
    p->run();
    wait_all_full(*p, g);
    p->stop(dflash::stop_mode::drain);
    g.release();
    CHECK_NOTHROW(p->join());
    CHECK_FALSE(p->cancelled());
    CHECK(e.threads.load() == 0);
    CHECK(e.st[0].calls.load() == items_when_full);
    REQUIRE(e.sunk.size() == static_cast<std::size_t>(items_when_full));
    const std::set<int> ids(e.sunk.begin(), e.sunk.end());
    CHECK(ids.size() == e.sunk.size());
    CHECK(*ids.rbegin() == items_when_full - 1);
    check_profile(prof, e, {1, 2, 1, 1});
  }
  check_all_released(e);
}

// ---- destructor of a pipeline that was never joined ------------------------

TEST_CASE("destroying a running, never-joined pipeline cancels, joins and frees everything", "[fault][dtor]") {
  SECTION("right after run()") {
    watchdog wd("destructor right after run()");
    env e;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 2, 2>(e, prof);
      p->run();
      p.reset();
      CHECK(e.threads.load() == 0);
    }
    check_all_released(e);
  }
  SECTION("with producers blocked on full queues behind a slow sink") {
    watchdog wd("destructor under full queues");
    env e;
    e.on_sink = [](int) { std::this_thread::sleep_for(1ms); };
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 1, 1, true>(e, prof);
      p->run();
      wait_until([&] { return p->link<0>().blocked_pushers() == 1 && p->link<1>().blocked_pushers() >= 1; });
      p.reset();
      CHECK(e.threads.load() == 0);
      CHECK(e.st[3].after_cancel.load() <= 1);
    }
    check_all_released(e);
  }
  SECTION("with a stage error nobody observed: dropped, no std::terminate") {
    watchdog wd("destructor with a pending error");
    env e;
    e.fault_stage = 1;
    e.fault_at = 5;
    e.message = "never observed";
    {
      profiler prof;
      auto p = make_pipeline<profiler, 3, 1, 1>(e, prof);
      p->run();
      wait_until([&] { return e.thrown.load() == 1 && p->cancelled(); });
      p.reset();
      CHECK(e.threads.load() == 0);
    }
    check_all_released(e);
  }
  SECTION("never run, or stopped without run") {
    env e;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 2, 2>(e, prof);
      auto q = make_pipeline<profiler, 1, 1, 1>(e, prof);
      q->stop();
    }
    check_all_released(e);
    CHECK(e.st[0].calls.load() == 0);
  }
}

// ---- lifecycle: join()/run() called in odd orders --------------------------
// Defined behaviour (documented in pipeline.hpp):
//   join() before run()      std::logic_error (nothing ran: a forgotten run()); run() still works after
//   join() after join()      returns at once; an error is reported by the first join() only
//   run() after run()/join() std::logic_error "dflash::Pipeline::run(): the pipeline was already started"
//   stop() before run()      run() then starts threads that exit at once: no stage is called

TEST_CASE("join() twice, run() twice, join() before run(), stop() before run()", "[fault][lifecycle]") {
  watchdog wd("lifecycle");
  const auto already_started =
      Catch::Matchers::Message("dflash::Pipeline::run(): the pipeline was already started");
  SECTION("join() before run() throws; the pipeline still runs afterwards") {
    env e;
    e.source_limit = 10;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 1, 1>(e, prof);
      CHECK_THROWS_AS(p->join(), std::logic_error);
      p->run();
      CHECK_NOTHROW(p->join());
      CHECK(e.sunk.size() == 10);
    }
    check_all_released(e);
  }
  SECTION("join() twice after a clean run: the second returns at once") {
    env e;
    e.source_limit = 10;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 1, 2, 1>(e, prof);
      p->run();
      CHECK_NOTHROW(p->join());
      CHECK_NOTHROW(p->join());
      CHECK(e.sunk.size() == 10);
      CHECK_THROWS_MATCHES(p->run(), std::logic_error, already_started);  // run() after join()
      CHECK(e.st[0].calls.load() == 10);
      check_profile(prof, e, {1, 1, 2, 1});
    }
    check_all_released(e);
  }
  SECTION("join() twice after a failure: the error is reported once") {
    env e;
    e.fault_stage = 2;
    e.fault_at = 3;
    e.message = "once";
    {
      profiler prof;
      auto p = make_pipeline<profiler, 1, 1, 1>(e, prof);
      p->run();
      CHECK_THROWS_MATCHES(p->join(), std::runtime_error, Catch::Matchers::Message("once"));
      CHECK_NOTHROW(p->join());
    }
    check_all_released(e);
  }
  SECTION("run() twice: the second throws and the running pipeline is unaffected") {
    env e;
    e.source_limit = 50;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 2, 1>(e, prof);
      p->run();
      CHECK_THROWS_MATCHES(p->run(), std::logic_error, already_started);
      CHECK_NOTHROW(p->join());
      CHECK(e.sunk.size() == 50);
    }
    check_all_released(e);
  }
  SECTION("stop() before run(): no stage is ever called") {
    env e;
    {
      profiler prof;
      auto p = make_pipeline<profiler, 2, 2, 2>(e, prof);
      p->stop();
      p->run();
      CHECK_NOTHROW(p->join());
      for (const auto& s : e.st) CHECK(s.calls.load() == 0);
    }
    check_all_released(e);
  }
}
