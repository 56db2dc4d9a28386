// device_channel on the asynchronous host twin: the producer's and consumer's
// work really runs later on other threads, so a missing wait is wrong data here
// (and a TSan race), as on a GPU.
#include <catch2/catch.hpp>
#include <dflash/device/device_channel.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/profile.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

namespace {
constexpr std::size_t words = 256;

int pattern(int producer, int seq, std::size_t i) { return producer * 1000003 + seq * 131 + static_cast<int>(i); }

struct slot : dflash::device_item<B> {
  int producer = -1, seq = -1;  // host fields: written before publish, read after pop
  dflash::device_buffer<int, B> data;
};

struct delivered {
  int producer, seq;
  bool intact;
};

// Producers and consumers, each a host thread with its own stream.
struct harness {
  B backend;
  dflash::device_channel<slot> ch;
  std::mutex m;
  std::vector<std::vector<delivered>> per_consumer;
  bool relaxed = false;  // atomic accesses (for the dropped-wait test, which races on purpose)
  int slow_ms = 2;       // every 7th producer work sleeps this long first
  std::atomic<bool> acquire_failed{false};

  harness(std::size_t depth, std::size_t consumers) : ch(backend, depth), per_consumer(consumers) {}

  void produce(int id, int n) {
    auto st = backend.create_stream();
    const DS s(backend, st);
    for (int q = 0; q < n; ++q) {
      auto r = ch.acquire(s);
      if (!r) {  // Catch assertions stay on the main thread (not thread-safe)
        acquire_failed = true;
        break;
      }
      slot& it = r->item();
      it.producer = id;
      it.seq = q;
      int* d = it.data.ensure(words, s);
      const bool slow = q % 7 == 0, atomics = relaxed;
      const int ms = slow_ms;
      s.enqueue([d, id, q, slow, atomics, ms] {
        if (slow) std::this_thread::sleep_for(std::chrono::milliseconds(ms));  // the consumer must wait for this
        for (std::size_t i = 0; i < words; ++i) {
          if (atomics) std::atomic_ref<int>(d[i]).store(pattern(id, q, i), std::memory_order_relaxed);
          else d[i] = pattern(id, q, i);
        }
      });
      ch.publish(std::move(*r), s);
    }
    backend.synchronize(st);
    backend.destroy_stream(st);
  }

  void consume(std::size_t id) {
    auto st = backend.create_stream();
    const DS s(backend, st);
    std::vector<delivered>* out = &per_consumer[id];  // appended on the stream thread only
    while (auto r = ch.pop(s)) {
      const slot& it = r->item();
      const int p = it.producer, q = it.seq;
      const int* d = it.data.data();
      const bool atomics = relaxed;
      s.enqueue([d, p, q, out, atomics] {
        bool ok = true;
        for (std::size_t i = 0; i < words; ++i) {
          const int v = atomics ? std::atomic_ref<const int>(d[i]).load(std::memory_order_relaxed) : d[i];
          ok = ok && v == pattern(p, q, i);
        }
        out->push_back({p, q, ok});
      });
      ch.release(std::move(*r), s);
    }
    backend.synchronize(st);
    backend.destroy_stream(st);
  }

  void run(int producers, int per_producer) {
    std::vector<std::thread> ps, cs;
    for (std::size_t c = 0; c < per_consumer.size(); ++c) cs.emplace_back([this, c] { consume(c); });
    for (int p = 0; p < producers; ++p) ps.emplace_back([this, p, per_producer] { produce(p, per_producer); });
    for (auto& t : ps) t.join();
    ch.close();
    for (auto& t : cs) t.join();
  }
};
}  // namespace

TEST_CASE("device_channel: exactly once, intact, in order per producer, 1-8 workers per side, K = 1..8",
          "[device][channel]") {
  watchdog wd("channel matrix", std::chrono::seconds(120));
  for (std::size_t depth : {1u, 2u, 3u, 8u}) {
    for (auto [producers, consumers] : {std::pair{1, 1}, std::pair{2, 3}, std::pair{8, 1}, std::pair{1, 8}, std::pair{4, 4}}) {
      CAPTURE(depth, producers, consumers);
      harness h(depth, static_cast<std::size_t>(consumers));
      constexpr int n = 40;
      h.run(producers, n);
      REQUIRE_FALSE(h.acquire_failed.load());
      std::map<std::pair<int, int>, int> count;
      for (const auto& v : h.per_consumer) {
        std::map<int, int> last;  // per producer: seqs reach each consumer in increasing order
        for (const delivered& d : v) {
          CHECK(d.intact);
          ++count[{d.producer, d.seq}];
          auto [it, fresh] = last.try_emplace(d.producer, d.seq);
          if (!fresh) {
            CHECK(d.seq > it->second);
            it->second = d.seq;
          }
        }
      }
      REQUIRE(count.size() == static_cast<std::size_t>(producers * n));
      for (const auto& [k, c] : count) CHECK(c == 1);
      // The per-item path never blocks on the device: only the 1 sync per thread at its end.
      CHECK(h.backend.stats().synchronizes == static_cast<std::uint64_t>(producers + consumers));
      CHECK(h.backend.stats().host_waits == 0);
    }
  }
}

TEST_CASE("device_channel: the host blocks only when K items are in flight (backpressure)", "[device][channel]") {
  watchdog wd("channel backpressure");
  B b;
  dflash::device_channel<slot> ch(b, 2);
  auto st = b.create_stream();
  const DS s(b, st);
  auto a = ch.acquire(s), c = ch.acquire(s);
  REQUIRE(a);
  REQUIRE(c);
  std::atomic<bool> got_third{false};
  std::thread t([&] {
    auto third = ch.acquire(s);
    got_third = third.has_value();
    if (third) ch.abandon(std::move(*third), s);
  });
  std::this_thread::sleep_for(30ms);
  CHECK_FALSE(got_third.load());  // both slots in flight
  ch.publish(std::move(*a), s);
  auto r = ch.pop(s);
  REQUIRE(r);
  CHECK_FALSE(got_third.load());  // popped but not released: still in flight
  ch.release(std::move(*r), s);
  t.join();
  CHECK(got_third.load());
  ch.abandon(std::move(*c), s);
  b.synchronize(st);
  b.destroy_stream(st);
}

TEST_CASE("device_channel: close drains published items; cancel wakes blocked producers and consumers",
          "[device][channel]") {
  watchdog wd("channel close/cancel");
  B b;
  auto st = b.create_stream();
  const DS s(b, st);
  {
    dflash::device_channel<slot> ch(b, 3);
    for (int i = 0; i < 3; ++i) {
      auto r = ch.acquire(s);
      r->item().seq = i;
      ch.publish(std::move(*r), s);
    }
    ch.close();
    for (int i = 0; i < 3; ++i) {
      auto r = ch.pop(s);
      REQUIRE(r);
      CHECK(r->item().seq == i);
      ch.release(std::move(*r), s);
    }
    CHECK_FALSE(ch.pop(s));
  }
  {
    dflash::device_channel<slot> ch(b, 1);
    auto held = ch.acquire(s);
    std::optional<bool> producer_got, consumer_got;
    std::thread prod([&] { producer_got = ch.acquire(s).has_value(); });
    std::thread cons([&] { consumer_got = ch.pop(s).has_value(); });
    std::this_thread::sleep_for(20ms);
    ch.cancel();
    prod.join();
    cons.join();
    CHECK(producer_got == false);
    CHECK(consumer_got == false);
    ch.abandon(std::move(*held), s);
  }
  {
    dflash::device_channel<slot> ch(b, 3);  // free slots left, but cancelled: no more slots handed out
    ch.cancel();
    CHECK_FALSE(ch.acquire(s));
    CHECK_FALSE(ch.pop(s));
  }
  b.synchronize(st);
  b.destroy_stream(st);
}

TEST_CASE("device_channel: destruction waits for work in flight before freeing slots", "[device][channel]") {
  watchdog wd("channel teardown");
  B b;
  auto st = b.create_stream();
  const DS s(b, st);
  std::atomic<int> finished{0};
  {
    dflash::device_channel<slot> ch(b, 2);
    auto r = ch.acquire(s);
    int* d = r->item().data.ensure(words, s);
    s.enqueue([d, &finished] {
      std::this_thread::sleep_for(30ms);
      for (std::size_t i = 0; i < words; ++i) d[i] = 1;  // ASan: use-after-free if the slot was freed early
      finished.fetch_add(1);
    });
    ch.publish(std::move(*r), s);
  }  // ~device_channel
  CHECK(finished.load() == 1);
  b.destroy_stream(st);
}

TEST_CASE("device_channel: a dropped wait on `ready` is caught as wrong data", "[device][channel]") {
  watchdog wd("channel dropped wait");
  // Control: the same run with every wait delivers intact data...
  {
    harness h(2, 1);
    h.relaxed = true;
    h.run(1, 14);
    for (const auto& d : h.per_consumer[0]) CHECK(d.intact);
  }
  // ...and with the wait of item 7 (a slow one) dropped, the consumer reads it before it is written.
  harness h(2, 1);
  h.relaxed = true;  // atomics: the race is the point here, not a TSan report
  h.slow_ms = 50;    // long enough that the consumer gets there first, even under TSan
  h.ch.drop_ready_wait_for_testing(8);  // the 8th pop = seq 7, whose producer sleeps first
  h.run(1, 14);
  int broken = 0;
  for (const auto& d : h.per_consumer[0]) broken += d.intact ? 0 : 1;
  CHECK(broken == 1);
}

TEST_CASE("device_channel: blocked time is recorded under <name>.push_wait / .pop_wait", "[device][channel]") {
  watchdog wd("channel keys");
  using prof_t = dflash::AccumulatingProfiler<dflash::queue_keys<"hs_device">>;
  prof_t prof;
  B b;
  dflash::device_channel<slot, prof_t, "hs_device"> ch(b, 1, prof);
  auto st = b.create_stream();
  const DS s(b, st);
  std::thread cons([&] {
    auto r = ch.pop(s);  // blocks ~20 ms
    if (r) ch.release(std::move(*r), s);
  });
  std::this_thread::sleep_for(20ms);
  auto r = ch.acquire(s);
  ch.publish(std::move(*r), s);
  cons.join();
  const auto snap = prof.snapshot();
  REQUIRE(snap.find("hs_device.pop_wait"));
  CHECK(snap.find("hs_device.pop_wait")->count == 1);
  CHECK(snap.find("hs_device.pop_wait")->total_ns >= 15'000'000u);
  CHECK(snap.find("hs_device.push_wait")->count == 1);
  b.synchronize(st);
  b.destroy_stream(st);
}

TEST_CASE("device_channel: depth 0 is rejected with a clear error", "[device][channel]") {
  B b;
  CHECK_THROWS_WITH((dflash::device_channel<slot, dflash::NullProfiler, "hs">(b, 0)),
                    Catch::Contains("'hs': depth must be at least 1"));
}

namespace {
// Work on a slot that finishes late: writes `value` into every word after `ms`.
void late_write(const DS& s, int* d, int value, int ms) {
  s.enqueue([d, value, ms] {
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    for (std::size_t i = 0; i < words; ++i) std::atomic_ref<int>(d[i]).store(value, std::memory_order_relaxed);
  });
}
void write_now(const DS& s, int* d, int value) {
  s.enqueue([d, value] {
    for (std::size_t i = 0; i < words; ++i) std::atomic_ref<int>(d[i]).store(value, std::memory_order_relaxed);
  });
}
int words_equal_to(const int* d, int value) {
  int n = 0;
  for (std::size_t i = 0; i < words; ++i) n += std::atomic_ref<const int>(d[i]).load(std::memory_order_relaxed) == value;
  return n;
}
}  // namespace

// A producer that enqueued work on a slot and then gives it back unpublished
// (a source that found itself exhausted, or a publish after close) must not let
// the next producer, on another stream, write the slot under that work.
TEST_CASE("device_channel: a slot given back unpublished is reused only after the work enqueued on it",
          "[device][channel]") {
  watchdog wd("channel abandon / publish after close");
  B b;
  auto sa = b.create_stream(), sb = b.create_stream();
  const DS a(b, sa), bs(b, sb);
  for (const bool via_close : {false, true}) {
    CAPTURE(via_close);
    dflash::device_channel<slot> ch(b, 1);
    auto r = ch.acquire(a);
    REQUIRE(r);
    int* d = r->item().data.ensure(words, a);
    late_write(a, d, 1, 40);  // A's work on the slot ends ~40 ms from now
    if (via_close) {
      ch.close();
      CHECK_FALSE(ch.publish(std::move(*r), a));  // closed: dropped, the slot goes back
    } else {
      ch.abandon(std::move(*r), a);
    }
    auto r2 = ch.acquire(bs);  // producer B, another stream
    REQUIRE(r2);
    REQUIRE(r2->item().data.data() == d);  // K = 1: the same slot
    write_now(bs, d, 2);                   // must run after A's late write, not before it
    b.synchronize(sb);
    b.synchronize(sa);
    CHECK(words_equal_to(d, 2) == static_cast<int>(words));  // B's data, not overwritten by A's late work
    ch.abandon(std::move(*r2), bs);
  }
  b.synchronize(sa);
  b.synchronize(sb);
  b.destroy_stream(sa);
  b.destroy_stream(sb);
}

TEST_CASE("device_channel: a depth no queue could hold is rejected as for bounded_queue, not as bad_alloc",
          "[device][channel]") {
  B b;
  CHECK_THROWS_AS((dflash::device_channel<slot, dflash::NullProfiler, "hs">(b, (std::size_t{1} << 61) + 1)),
                  std::invalid_argument);
  CHECK_THROWS_WITH((dflash::device_channel<slot, dflash::NullProfiler, "hs">(b, (std::size_t{1} << 61) + 1)),
                    Catch::Contains("'hs': capacity must be at most 2^61"));
}

namespace {
// The host twin with a record or a wait that fails on demand, as a CUDA call
// does when its device fails.
struct flaky_backend : dflash::host_stream_backend {
  int record_fails_in = 0, wait_fails_in = 0;  // n > 0: the n-th call from now throws
  void record(event_type e, stream_type s) {
    if (record_fails_in > 0 && --record_fails_in == 0) throw std::runtime_error("injected: record failed");
    host_stream_backend::record(e, s);
  }
  void wait(stream_type s, event_type e) {
    if (wait_fails_in > 0 && --wait_fails_in == 0) throw std::runtime_error("injected: wait failed");
    host_stream_backend::wait(s, e);
  }
};
struct flaky_item : dflash::device_item<flaky_backend> {
  int v = 0;
};
}  // namespace

TEST_CASE("device_channel: a CUDA call that throws in acquire, publish, pop or release loses no slot",
          "[device][channel]") {
  watchdog wd("channel slots after a failed call");
  using FS = dflash::device_stream<flaky_backend>;
  enum class at { acquire, publish, pop, release };
  for (const at where : {at::acquire, at::publish, at::pop, at::release}) {
    CAPTURE(static_cast<int>(where));
    flaky_backend b;
    auto sp = b.create_stream(), sc = b.create_stream();
    const FS p(b, sp), c(b, sc);
    {
      constexpr std::size_t depth = 2;
      dflash::device_channel<flaky_item> ch(b, depth);
      for (std::size_t k = 0; k < depth; ++k) {  // each slot once round: acquire then waits on its reader
        auto r = ch.acquire(p);
        REQUIRE(r);
        REQUIRE(ch.publish(std::move(*r), p));
        auto q = ch.pop(c);
        REQUIRE(q);
        ch.release(std::move(*q), c);
      }
      switch (where) {
        case at::acquire:
          b.wait_fails_in = 1;
          CHECK_THROWS_WITH(ch.acquire(p), Catch::Contains("injected"));
          break;
        case at::publish: {
          auto r = ch.acquire(p);
          REQUIRE(r);
          b.record_fails_in = 1;
          CHECK_THROWS_WITH(ch.publish(std::move(*r), p), Catch::Contains("injected"));
          break;
        }
        case at::pop: {
          auto r = ch.acquire(p);
          REQUIRE(r);
          REQUIRE(ch.publish(std::move(*r), p));
          b.wait_fails_in = 1;
          CHECK_THROWS_WITH(ch.pop(c), Catch::Contains("injected"));
          break;
        }
        case at::release: {
          auto r = ch.acquire(p);
          REQUIRE(r);
          REQUIRE(ch.publish(std::move(*r), p));
          auto q = ch.pop(c);
          REQUIRE(q);
          b.record_fails_in = 1;
          CHECK_THROWS_WITH(ch.release(std::move(*q), c), Catch::Contains("injected"));
          break;
        }
      }
      // Every slot can still be acquired; a lost one would block the last acquire.
      std::vector<std::optional<dflash::device_channel<flaky_item>::slot_ref>> held;
      for (std::size_t k = 0; k < depth; ++k) {
        auto got = std::async(std::launch::async, [&] { return ch.acquire(p); });
        if (got.wait_for(2s) != std::future_status::ready) {
          ch.cancel();  // unblocks it
          FAIL_CHECK("slot " << k << " of " << depth << " cannot be acquired: the failed call lost it");
        }
        held.push_back(got.get());
        if (!held.back()) break;
      }
      for (auto& r : held)
        if (r) ch.abandon(std::move(*r), p);
    }
    b.synchronize(sp);
    b.synchronize(sc);
    b.destroy_stream(sp);
    b.destroy_stream(sc);
  }
}

// A failed call's slot goes back, but never while work still touches it: the
// next producer (on another stream) must start after that work, or it would
// overwrite what the reader reads, or be overwritten by the first producer.
TEST_CASE("device_channel: a slot given back after a failed release or pop waits for the work still on it",
          "[device][channel]") {
  watchdog wd("channel give-back after a failed call");
  using FS = dflash::device_stream<flaky_backend>;
  for (const bool failed_release : {true, false}) {
    CAPTURE(failed_release);
    flaky_backend b;
    auto sp = b.create_stream(), sp2 = b.create_stream(), sc = b.create_stream();
    const FS p(b, sp), p2(b, sp2), c(b, sc);
    std::atomic<int> cell{0}, seen{-1};
    {
      dflash::device_channel<flaky_item> ch(b, 1);
      auto r = ch.acquire(p);
      REQUIRE(r);
      p.enqueue([&, failed_release] {
        if (!failed_release) std::this_thread::sleep_for(50ms);  // the first producer is slow
        cell = 1;
      });
      REQUIRE(ch.publish(std::move(*r), p));
      if (failed_release) {
        auto q = ch.pop(c);
        REQUIRE(q);
        c.enqueue([&] {  // the reader is slow
          std::this_thread::sleep_for(50ms);
          seen = cell.load();
        });
        b.record_fails_in = 1;
        CHECK_THROWS_WITH(ch.release(std::move(*q), c), Catch::Contains("injected"));
      } else {
        b.wait_fails_in = 1;
        CHECK_THROWS_WITH(ch.pop(c), Catch::Contains("injected"));
      }
      auto again = ch.acquire(p2);  // the one slot, on another stream
      REQUIRE(again);
      p2.enqueue([&] { cell = 2; });
      ch.abandon(std::move(*again), p2);
      b.synchronize(sp);
      b.synchronize(sp2);
      b.synchronize(sc);
    }
    if (failed_release) CHECK(seen.load() == 1);  // the reader saw what it was handed
    CHECK(cell.load() == 2);                      // the second producer's write came last
    for (auto s : {sp, sp2, sc}) b.destroy_stream(s);
  }
}
