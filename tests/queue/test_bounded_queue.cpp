#include <catch2/catch.hpp>
#include <dflash/profile.hpp>
#include <dflash/queue/bounded_queue.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <limits>
#include <optional>
#include <ratio>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using dflash::bounded_queue;
using dflash::manual_clock;
using dflash::queue_status;

namespace {
// Spin (yielding) until pred() holds. Bounded: a hang fails the test, not CI.
template <class Pred>
void wait_until(Pred pred) {
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) FAIL("condition not reached within 30 s");
    std::this_thread::yield();
  }
}
}  // namespace

TEST_CASE("capacity 0 is rejected with a clear message", "[bounded_queue]") {
  watchdog wd("capacity 0 is rejected with a clear message");
  using named = bounded_queue<int, dflash::NullProfiler, "hs_queue">;
  CHECK_THROWS_MATCHES(named(0), std::invalid_argument,
                       Catch::Matchers::Message("dflash::bounded_queue 'hs_queue': capacity must be at least 1 (got 0)"));
}

TEST_CASE("FIFO order, try_push when full, try_pop when empty", "[bounded_queue]") {
  watchdog wd("FIFO order, try_push when full, try_pop when empty");
  bounded_queue<int> q(3);
  CHECK(q.capacity() == 3);
  CHECK(q.empty());
  CHECK_FALSE(q.try_pop().has_value());
  REQUIRE(q.push(1));
  REQUIRE(q.try_push(2) == queue_status::ok);
  REQUIRE(q.push(3));
  CHECK(q.size() == 3);
  CHECK(q.try_push(4) == queue_status::full);
  CHECK(q.pop() == 1);
  REQUIRE(q.push(4));  // wraps around the ring
  CHECK(q.try_pop() == 2);
  CHECK(q.pop() == 3);
  CHECK(q.pop() == 4);
  CHECK(q.empty());
}

TEST_CASE("close: pops drain what is left, pushes fail and keep their argument", "[bounded_queue]") {
  watchdog wd("close: pops drain what is left, pushes fail and keep their argument");
  bounded_queue<std::unique_ptr<int>> q(4);
  REQUIRE(q.push(std::make_unique<int>(7)));
  REQUIRE(q.push(std::make_unique<int>(8)));
  q.close();
  q.close();  // idempotent
  CHECK(q.closed());
  auto keep = std::make_unique<int>(9);
  CHECK_FALSE(q.push(std::move(keep)));
  REQUIRE(keep != nullptr);  // a failed push does not consume its argument
  CHECK(*keep == 9);
  CHECK(q.try_push(std::move(keep)) == queue_status::closed);
  CHECK(q.push_for(std::move(keep), 1ms) == queue_status::closed);
  REQUIRE(keep != nullptr);
  auto a = q.pop();
  REQUIRE(a.has_value());
  CHECK(**a == 7);
  auto b = q.pop_for(1s);
  REQUIRE(b.has_value());
  CHECK(**b == 8);
  CHECK_FALSE(q.pop().has_value());
  CHECK_FALSE(q.pop_for(1s).has_value());
}

TEST_CASE("close() wakes a pop blocked on an empty queue", "[bounded_queue]") {
  watchdog wd("close() wakes a pop blocked on an empty queue");
  bounded_queue<int> q(2);
  std::optional<int> got = 42;
  std::thread t([&] { got = q.pop(); });
  wait_until([&] { return q.blocked_poppers() == 1; });
  q.close();
  t.join();
  CHECK_FALSE(got.has_value());
  CHECK(q.blocked_poppers() == 0);
}

TEST_CASE("close() wakes every push blocked on a full queue", "[bounded_queue]") {
  watchdog wd("close() wakes every push blocked on a full queue");
  bounded_queue<int> q(1);
  REQUIRE(q.push(0));
  std::atomic<int> failed{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&, i] {
      if (!q.push(i + 1)) failed.fetch_add(1);
    });
  wait_until([&] { return q.blocked_pushers() == 3; });
  q.close();
  for (auto& t : ts) t.join();
  CHECK(failed.load() == 3);
  CHECK(q.size() == 1);
  CHECK(q.pop() == 0);
}

TEST_CASE("timeouts: push_for on a full queue and pop_for on an empty one", "[bounded_queue]") {
  watchdog wd("timeouts: push_for on a full queue and pop_for on an empty one");
  bounded_queue<int> q(1);
  using sc = std::chrono::steady_clock;
  auto t0 = sc::now();
  CHECK_FALSE(q.pop_for(20ms).has_value());
  CHECK(sc::now() - t0 >= 20ms);  // wait_until never returns early on timeout
  REQUIRE(q.push(1));
  t0 = sc::now();
  CHECK(q.push_for(2, 20ms) == queue_status::timeout);
  CHECK(sc::now() - t0 >= 20ms);
  CHECK(q.push_for(3, -1ms) == queue_status::timeout);  // negative = try once
  CHECK(q.pop_for(0ms) == 1);
  CHECK(q.push_for(4, 1s) == queue_status::ok);
  CHECK(q.pop() == 4);
}

TEST_CASE("a pop_for woken by a push returns the item before its deadline", "[bounded_queue]") {
  watchdog wd("a pop_for woken by a push returns the item before its deadline");
  bounded_queue<int> q(1);
  std::optional<int> got;
  std::thread t([&] { got = q.pop_for(60s); });
  wait_until([&] { return q.blocked_poppers() == 1; });
  REQUIRE(q.push(5));
  t.join();
  CHECK(got == 5);
}

// now() + nanoseconds::max() overflows, which would make a "forever" timeout
// return at once. The deadline must saturate: the call blocks until an item
// (or room) arrives.
namespace {
template <class D>
void pop_for_blocks_until_push(D timeout) {
  bounded_queue<int> q(1);
  std::atomic<bool> returned{false};
  std::optional<int> got;
  std::thread t([&] {
    got = q.pop_for(timeout);
    returned = true;
  });
  wait_until([&] { return q.blocked_poppers() == 1 || returned.load(); });
  std::this_thread::sleep_for(20ms);
  const bool early = returned.load();
  REQUIRE(q.push(7));
  t.join();
  CHECK_FALSE(early);
  CHECK(got == 7);
}
template <class D>
void push_for_blocks_until_pop(D timeout) {
  bounded_queue<int> q(1);
  REQUIRE(q.push(1));
  std::atomic<bool> returned{false};
  queue_status st = queue_status::full;
  std::thread t([&] {
    st = q.push_for(2, timeout);
    returned = true;
  });
  wait_until([&] { return q.blocked_pushers() == 1 || returned.load(); });
  std::this_thread::sleep_for(20ms);
  const bool early = returned.load();
  CHECK(q.pop() == 1);
  t.join();
  CHECK_FALSE(early);
  CHECK(st == queue_status::ok);
  CHECK(q.pop() == 2);
}
}  // namespace

TEST_CASE("push_for / pop_for with a 'forever' timeout wait (deadline saturates)", "[bounded_queue]") {
  watchdog wd("push_for / pop_for with a 'forever' timeout wait (deadline saturates)");
  using years = std::chrono::duration<std::int64_t, std::ratio<31556952>>;
  SECTION("nanoseconds::max") {
    pop_for_blocks_until_push(std::chrono::nanoseconds::max());
    push_for_blocks_until_pop(std::chrono::nanoseconds::max());
  }
  SECTION("hours::max") {
    pop_for_blocks_until_push(std::chrono::hours::max());
    push_for_blocks_until_pop(std::chrono::hours::max());
  }
  SECTION("seconds::max") {
    pop_for_blocks_until_push(std::chrono::seconds::max());
    push_for_blocks_until_pop(std::chrono::seconds::max());
  }
  SECTION("1000 years") {
    pop_for_blocks_until_push(years(1000));
    push_for_blocks_until_pop(years(1000));
  }
  SECTION("infinite double seconds") {
    const std::chrono::duration<double> inf(std::numeric_limits<double>::infinity());
    pop_for_blocks_until_push(inf);
    push_for_blocks_until_pop(inf);
  }
}

TEST_CASE("push_for / pop_for reject a NaN timeout", "[bounded_queue]") {
  watchdog wd("push_for / pop_for reject a NaN timeout");
  bounded_queue<int> q(1);
  const std::chrono::duration<double> nan(std::numeric_limits<double>::quiet_NaN());
  CHECK_THROWS_WITH(q.pop_for(nan), Catch::Matchers::Contains("timeout is NaN"));
  REQUIRE(q.push(1));
  CHECK_THROWS_WITH(q.push_for(2, nan), Catch::Matchers::Contains("timeout is NaN"));
  CHECK(q.size() == 1);
}

TEST_CASE("queue_keys names the two wait keys of a queue", "[bounded_queue][keys]") {
  watchdog wd("queue_keys names the two wait keys of a queue");
  using k = dflash::queue_keys<"hs_queue">;
  STATIC_REQUIRE(std::is_same_v<k, dflash::key_set<"hs_queue.push_wait", "hs_queue.pop_wait">>);
  STATIC_REQUIRE(std::is_same_v<bounded_queue<int, dflash::NullProfiler, "hs_queue">::keys, k>);
  using both = dflash::key_set_cat_t<k, dflash::queue_keys<"batch_queue">>;
  STATIC_REQUIRE(both::size == 4);
  CHECK(both::names[2] == "batch_queue.push_wait");
}

TEST_CASE("a NullProfiler queue holds no profiler state", "[bounded_queue][keys]") {
  watchdog wd("a NullProfiler queue holds no profiler state");
  // The stateful queue carries exactly one pointer more: the profiler handle.
  using accumulating = bounded_queue<int, dflash::AccumulatingProfiler<dflash::queue_keys<"queue">>>;
  STATIC_REQUIRE(sizeof(accumulating) == sizeof(bounded_queue<int>) + sizeof(void*));
}

TEST_CASE("wait time is recorded under <name>.push_wait and <name>.pop_wait", "[bounded_queue][keys]") {
  watchdog wd("wait time is recorded under <name>.push_wait and <name>.pop_wait");
  using prof_t = dflash::AccumulatingProfiler<dflash::queue_keys<"hs">, manual_clock>;
  manual_clock::set(manual_clock::time_point{});
  prof_t prof;
  bounded_queue<int, prof_t, "hs"> q(1, prof);

  // A pop that blocks for exactly 5 ms of the manual clock.
  std::optional<int> got;
  std::thread consumer([&] { got = q.pop(); });
  wait_until([&] { return q.blocked_poppers() == 1; });  // it has started timing
  manual_clock::advance(5ms);
  REQUIRE(q.push(1));  // does not block: recorded as a zero wait
  consumer.join();
  CHECK(got == 1);

  // A push that blocks for exactly 3 ms.
  REQUIRE(q.push(2));  // fills the queue, no wait
  bool pushed = false;  // Catch assertions stay on the main thread
  std::thread producer([&] { pushed = q.push(3); });
  wait_until([&] { return q.blocked_pushers() == 1; });
  manual_clock::advance(3ms);
  CHECK(q.pop() == 2);  // no wait
  producer.join();
  CHECK(pushed);
  CHECK(q.pop() == 3);  // no wait

  const auto s = prof.snapshot();
  const auto& push = *s.find("hs.push_wait");
  const auto& pop = *s.find("hs.pop_wait");
  CHECK(push.count == 3);
  CHECK(push.total_ns == 3'000'000);
  CHECK(push.max_ns == 3'000'000);
  CHECK(push.min_ns == 0);
  CHECK(pop.count == 3);
  CHECK(pop.total_ns == 5'000'000);
  CHECK(pop.max_ns == 5'000'000);
  // try_* never wait and record nothing.
  CHECK(q.try_push(4) == queue_status::ok);
  CHECK(q.try_pop() == 4);
  CHECK(prof.count(dflash::push_wait_key<"hs">{}) == 3);
  CHECK(prof.count(dflash::pop_wait_key<"hs">{}) == 3);
  // A pipeline that took an item with try_pop records it as a pop that did not wait.
  q.record_pop();
  CHECK(prof.count(dflash::pop_wait_key<"hs">{}) == 4);
  CHECK(prof.snapshot().find("hs.pop_wait")->total_ns == 5'000'000);
}

namespace {
struct item {
  int producer;
  int seq;
};

// P producers push `per` items each; C consumers pop until closed. Checks FIFO
// per producer (each consumer sees a producer's items in increasing order) and
// that every item arrives exactly once. With a profiler, every push records
// exactly once and every pop (including each consumer's final empty pop) too.
template <class Q>
void mpmc_round(Q& q, int producers, int consumers, int per) {
  std::vector<std::vector<int>> seen_by(consumers);
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(producers) * per);
  std::atomic<bool> order_ok{true};
  std::vector<std::thread> cs, ps;
  for (int c = 0; c < consumers; ++c)
    cs.emplace_back([&] {
      std::vector<int> last(producers, -1);
      while (auto it = q.pop()) {
        if (it->seq <= last[it->producer]) order_ok = false;
        last[it->producer] = it->seq;
        hits[static_cast<std::size_t>(it->producer) * per + it->seq].fetch_add(1, std::memory_order_relaxed);
      }
    });
  for (int p = 0; p < producers; ++p)
    ps.emplace_back([&, p] {
      for (int i = 0; i < per; ++i)
        if (!q.push(item{p, i})) return;
    });
  for (auto& t : ps) t.join();
  q.close();
  for (auto& t : cs) t.join();
  CHECK(order_ok.load());
  std::size_t lost = 0, dup = 0;
  for (auto& h : hits) {
    const int n = h.load();
    lost += n == 0;
    dup += n > 1;
  }
  CHECK(lost == 0);
  CHECK(dup == 0);
}
}  // namespace

TEST_CASE("MPMC: 2 producers x 2 consumers, FIFO per producer, nothing lost", "[bounded_queue]") {
  watchdog wd("MPMC: 2 producers x 2 consumers, FIFO per producer, nothing lost");
  bounded_queue<item> q(8);
  mpmc_round(q, 2, 2, 20'000);
}

TEST_CASE("stress: 4 producers x 4 consumers x 250000 items, profiled", "[bounded_queue][stress]") {
  watchdog wd("stress: 4 producers x 4 consumers x 250000 items, profiled", 300s);
  using prof_t = dflash::AccumulatingProfiler<dflash::queue_keys<"stress">>;
  prof_t prof;
  bounded_queue<item, prof_t, "stress"> q(64, prof);
  mpmc_round(q, 4, 4, 250'000);
  CHECK(prof.count(dflash::push_wait_key<"stress">{}) == 1'000'000);
  CHECK(prof.count(dflash::pop_wait_key<"stress">{}) == 1'000'000 + 4);  // + each consumer's final pop
}

// Parking is where a wake-up can be lost: the waiter must advertise itself and
// re-check, and the other side must see the advertisement or be seen. Pauses
// longer than the spin phase force parks on both sides, over capacity 1 and 3
// (where a pop frees the exact slot a parked push waits for) with several
// threads per side. A lost wake-up is a hang; the watchdog turns it into a
// failure instead of a CI timeout.
// On a machine with more threads than cores the other side of a wait is
// usually not running: spinning for it burns the core it needs. Waits that
// outlast their spin shorten the next one, per side, down to a few pauses.
TEST_CASE("a wait that outlasts its spin shortens the next spin, per side", "[bounded_queue][parking]") {
  watchdog wd("a wait that outlasts its spin shortens the next spin, per side");
  bounded_queue<int> q(1);
  const int pop0 = q.pop_spin(), push0 = q.push_spin();
  REQUIRE(pop0 > bounded_queue<int>::min_spin);
  REQUIRE(push0 > bounded_queue<int>::min_spin);
  for (int i = 0; i < 8; ++i) {  // each pop waits ~5 ms: far longer than any spin
    bool pushed = false;
    std::thread t([&] {
      std::this_thread::sleep_for(5ms);
      pushed = q.push(i);
    });
    CHECK(q.pop() == i);
    t.join();
    REQUIRE(pushed);
  }
  CHECK(q.pop_spin() == bounded_queue<int>::min_spin);
  CHECK(q.push_spin() == push0);  // pushes that never waited leave the push side alone
  REQUIRE(q.push(-1));
  for (int i = 0; i < 8; ++i) {  // each push waits ~5 ms on the full queue
    std::optional<int> got;
    std::thread t([&] {
      std::this_thread::sleep_for(5ms);
      got = q.pop();
    });
    REQUIRE(q.push(i));
    t.join();
    CHECK(got == i - 1);
  }
  CHECK(q.push_spin() == bounded_queue<int>::min_spin);
  CHECK(q.pop_spin() == bounded_queue<int>::min_spin);
}

TEST_CASE("parking: no wake-up is lost when pushers and poppers park in turn", "[bounded_queue][parking]") {
  watchdog wd("parking: no wake-up is lost when pushers and poppers park in turn", 120s);
  for (const std::size_t cap : {std::size_t{1}, std::size_t{3}}) {
    CAPTURE(cap);
    bounded_queue<item> q(cap);
    constexpr int producers = 3, consumers = 3, per = 1500;
    std::atomic<int> popped{0};
    std::atomic<bool> finished{false}, watchdog_fired{false};
    std::thread closer([&] {
      const auto deadline = std::chrono::steady_clock::now() + 60s;
      while (!finished.load() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
      if (!finished.load()) {
        watchdog_fired = true;
        q.close();
      }
    });
    std::vector<std::atomic<int>> hits(static_cast<std::size_t>(producers) * per);
    std::vector<std::thread> ts;
    for (int c = 0; c < consumers; ++c)
      ts.emplace_back([&, c] {
        int n = 0;
        while (auto it = q.pop()) {
          hits[static_cast<std::size_t>(it->producer) * per + it->seq].fetch_add(1);
          popped.fetch_add(1);
          if (++n % (7 + c) == 0) std::this_thread::sleep_for(200us);  // pushers park meanwhile
        }
      });
    std::vector<std::thread> ps;
    for (int p = 0; p < producers; ++p)
      ps.emplace_back([&, p] {
        for (int i = 0; i < per; ++i) {
          if (!q.push(item{p, i})) return;
          if (i % (5 + p) == 0) std::this_thread::sleep_for(200us);  // poppers park meanwhile
        }
      });
    for (auto& t : ps) t.join();
    q.close();
    for (auto& t : ts) t.join();
    finished = true;
    closer.join();
    CHECK_FALSE(watchdog_fired.load());  // fired = some thread slept through its wake-up
    CHECK(popped.load() == producers * per);
    int wrong = 0;
    for (auto& h : hits) wrong += h.load() != 1;
    CHECK(wrong == 0);
  }
}

namespace {
// Constructed from an int: a negative one blocks in the constructor until
// `release` is set (a push that has claimed its slot but not published it);
// 13 throws.
struct gated {
  static inline std::atomic<bool> entered{false}, release{false};
  int v = 0;
  gated(int x) : v(x) {  // NOLINT: implicit on purpose (push(int))
    if (x == 13) throw std::runtime_error("gated: 13");
    if (x < 0) {
      entered = true;
      while (!release.load()) std::this_thread::sleep_for(1ms);
    }
  }
  gated(gated&&) = default;
  gated& operator=(gated&&) = default;
};
}  // namespace

// A pop_for whose position a push has claimed but not yet published keeps
// its deadline (it must not spin past it until the publish).
TEST_CASE("pop_for keeps its deadline while a claimed push has not published yet", "[bounded_queue][parking]") {
  watchdog wd("pop_for keeps its deadline while a claimed push has not published yet");
  gated::entered = false;
  gated::release = false;
  bounded_queue<gated> q(4);
  std::thread slow([&] { (void)q.push(-1); });
  wait_until([] { return gated::entered.load(); });
  std::thread releaser([] {  // bounds the test if pop_for ignores its deadline
    std::this_thread::sleep_for(2s);
    gated::release = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  const auto got = q.pop_for(20ms);
  const auto waited = std::chrono::steady_clock::now() - t0;
  releaser.join();
  slow.join();
  CHECK_FALSE(got.has_value());
  CHECK(waited < 1s);  // not ~2 s, when the push publishes
  CHECK(q.pop_for(1s).has_value());
}

// A push whose constructor throws after it has blocked leaves
// blocked_pushers() (and the parked count) as they were.
TEST_CASE("a blocked push whose constructor throws leaves no waiter counted", "[bounded_queue][parking]") {
  watchdog wd("a blocked push whose constructor throws leaves no waiter counted");
  bounded_queue<gated> q(1);
  REQUIRE(q.push(1));
  std::exception_ptr err;
  std::thread pusher([&] {
    try {
      (void)q.push(13);  // blocks (full), then throws in the constructor once there is room
    } catch (...) {
      err = std::current_exception();
    }
  });
  wait_until([&] { return q.blocked_pushers() == 1; });
  std::this_thread::sleep_for(20ms);  // past the spin phase: parked
  CHECK(q.pop().has_value());
  pusher.join();
  CHECK(err != nullptr);
  CHECK(q.blocked_pushers() == 0);
  // The failed push's slot holds no item: the next pop skips it.
  CHECK_FALSE(q.pop_for(10ms).has_value());
  // The queue still works both ways, blocking included.
  REQUIRE(q.push(2));
  std::thread late([&] { (void)q.push(3); });
  wait_until([&] { return q.blocked_pushers() == 1; });
  CHECK(q.pop()->v == 2);
  late.join();
  CHECK(q.pop()->v == 3);
}

// ---- a claim in flight meets a blocking call without a deadline -----------------
namespace {
struct gate {
  std::atomic<bool> entered{false}, open{false};
  void pass() {
    entered = true;
    while (!open.load()) std::this_thread::yield();
  }
};
// Its construction from a gate blocks until the gate opens: a push that has
// claimed its position but not published it.
struct slow_construct {
  int v = 1;
  explicit slow_construct(gate* g) { g->pass(); }
  slow_construct(slow_construct&&) = default;
  slow_construct& operator=(slow_construct&&) = default;
};
// Its move blocks until the gate opens: a pop that has claimed its position
// but not yet handed the slot back.
struct slow_move {
  gate* g;
  explicit slow_move(gate* gg) : g(gg) {}
  slow_move(slow_move&& o) noexcept : g(o.g) {
    if (g) g->pass();
  }
  slow_move& operator=(slow_move&& o) noexcept {
    g = o.g;
    return *this;
  }
};

// Waits up to 10 s (generous: the call returns within microseconds of the
// gate opening) for `done`; false = it slept through the publish.
bool returns_within_10s(const std::atomic<bool>& done) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!done.load()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(100us);
  }
  return true;
}
}  // namespace

// A pop() that finds its position claimed by a push that has not published
// yet must not sleep: that push read the "pop parked" bit before the pop set
// it, so its publish wakes no one. Each round parks the pop (past its spin
// phase) while the push is held inside its constructor, then lets it publish.
// A pop that sleeps through it fails the round in 10 s (it is then freed by close()).
TEST_CASE("pop() meeting a claimed, unpublished push never sleeps through its publish", "[bounded_queue][parking]") {
  watchdog wd("pop vs claimed push", 120s);
  for (int round = 0; round < 100; ++round) {
    CAPTURE(round);
    bounded_queue<slow_construct> q(1);
    gate g;
    std::thread pusher([&] { (void)q.push(&g); });
    wait_until([&] { return g.entered.load(); });
    std::atomic<bool> popped{false};
    std::optional<slow_construct> got;
    std::thread popper([&] {
      got = q.pop();
      popped = true;
    });
    wait_until([&] { return q.blocked_poppers() == 1; });
    std::this_thread::sleep_for(2ms);  // past the spin phase: at the parking step
    g.open = true;
    const bool ok = returns_within_10s(popped);
    if (!ok) q.close();
    pusher.join();
    popper.join();
    REQUIRE(ok);
    CHECK(got.has_value());
  }
}

// The mirror: a push() on a full queue whose blocking slot a pop has claimed
// but not handed back yet.
TEST_CASE("push() meeting a claimed, unfinished pop never sleeps through its release", "[bounded_queue][parking]") {
  watchdog wd("push vs claimed pop", 120s);
  for (int round = 0; round < 100; ++round) {
    CAPTURE(round);
    bounded_queue<slow_move> q(1);
    gate g, open_gate;
    open_gate.open = true;
    REQUIRE(q.push(&g));  // constructed in place: the gate is not passed yet
    std::thread popper([&] { (void)q.pop(); });  // blocks moving the item out
    wait_until([&] { return g.entered.load(); });
    std::atomic<bool> pushed{false};
    bool accepted = false;
    std::thread pusher([&] {
      accepted = q.push(&open_gate);
      pushed = true;
    });
    wait_until([&] { return q.blocked_pushers() == 1; });
    std::this_thread::sleep_for(2ms);
    g.open = true;
    const bool ok = returns_within_10s(pushed);
    if (!ok) q.close();
    popper.join();
    pusher.join();
    REQUIRE(ok);
    CHECK(accepted);
  }
}

// The contract device links rely on: try_push may say "full" below capacity
// while a pop of the blocking slot is half done; push() waits it out.
TEST_CASE("try_push can report full while a pop is half done; push() then succeeds", "[bounded_queue]") {
  watchdog wd("try_push contract");
  bounded_queue<slow_move> q(1);
  gate g, open_gate;
  open_gate.open = true;
  REQUIRE(q.push(&g));
  std::thread popper([&] { (void)q.pop(); });
  wait_until([&] { return g.entered.load(); });  // the pop has claimed the only slot
  CHECK(q.size() == 0);                            // nothing left to pop...
  CHECK(q.try_push(&open_gate) == queue_status::full);  // ...and still no free slot
  std::thread opener([&] {
    std::this_thread::sleep_for(5ms);
    g.open = true;
  });
  CHECK(q.push(&open_gate));
  opener.join();
  popper.join();
  CHECK(q.size() == 1);
}

// A push on a full ring first waits, while it spins, for the slot a quarter of
// the ring ahead to free up (bounded_queue::room_ready). That patience must
// stay a preference: one freed slot is enough for the push to complete,
// whether the pop comes while it spins or after it has parked.
TEST_CASE("a push blocked on a full ring takes the first slot a pop frees", "[bounded_queue][parking]") {
  watchdog wd("push takes one freed slot", 120s);
  for (const std::size_t cap : {std::size_t{4}, std::size_t{60}, std::size_t{1024}}) {
    for (int round = 0; round < 40; ++round) {
      CAPTURE(cap, round);
      bounded_queue<int> q(cap);
      for (std::size_t i = 0; i < cap; ++i) REQUIRE(q.try_push(static_cast<int>(i)) == queue_status::ok);
      std::atomic<bool> pushed{false};
      bool accepted = false;
      std::thread pusher([&] {
        accepted = q.push(-1);
        pushed = true;
      });
      wait_until([&] { return q.blocked_pushers() == 1; });
      if (round % 2 == 1) std::this_thread::sleep_for(2ms);  // past the spin: parked
      REQUIRE(q.pop() == 0);                                    // exactly one slot frees
      const bool ok = returns_within_10s(pushed);
      if (!ok) q.close();
      pusher.join();
      REQUIRE(ok);
      CHECK(accepted);
      CHECK(q.size() == cap);
      for (std::size_t i = 1; i < cap; ++i) CHECK(q.try_pop() == static_cast<int>(i));
      CHECK(q.try_pop() == -1);
    }
  }
}
