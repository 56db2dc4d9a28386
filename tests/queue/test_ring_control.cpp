// The device queue's control logic (ring_control), exercised on host threads
// through its host twin host_ring: same code, same atomics (libcu++).
#include <catch2/catch.hpp>
#include <dflash/queue/ring_control.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <vector>

using dflash::host_ring;
using dflash::ring_status;

TEST_CASE("host_ring: capacity 0 is rejected", "[ring]") {
  CHECK_THROWS_MATCHES(host_ring<int>(0), std::invalid_argument,
                       Catch::Matchers::Message("dflash::host_ring: capacity must be at least 1 (got 0)"));
}

// With one slot, "published for p" and "free for p+1" must be different
// sequence values, or a second push would overwrite the first item.
TEST_CASE("ring: capacity 1 holds exactly one item, lap after lap", "[ring]") {
  host_ring<int> r(1);
  for (int lap = 0; lap < 5; ++lap) {
    const int a = 10 * lap + 1, b = 10 * lap + 2;
    REQUIRE(r.try_push(&a, 1) == ring_status::ok);
    REQUIRE(r.try_push(&b, 1) == ring_status::full);  // not an overwrite of a
    CHECK(r.try_push(&b, 2) == ring_status::too_large);
    int out[2] = {};
    const auto t = r.try_pop(out, 2);
    REQUIRE(t.status == ring_status::ok);
    CHECK(t.count == 1);
    CHECK(t.first == static_cast<unsigned long long>(lap));
    CHECK(out[0] == a);
    REQUIRE(r.try_pop(out, 1).status == ring_status::empty);
  }
  r.close();
  int out = 0;
  CHECK(r.try_pop(&out, 1).status == ring_status::closed);
}

TEST_CASE("ring_control::check_capacity names the caller and the bad value", "[ring]") {
  CHECK_NOTHROW(dflash::ring_control::check_capacity(1, "device_queue"));
  CHECK_THROWS_MATCHES(dflash::ring_control::check_capacity(0, "dflash::device_queue"), std::invalid_argument,
                       Catch::Matchers::Message("dflash::device_queue: capacity must be at least 1 (got 0)"));
  CHECK_THROWS_WITH(dflash::ring_control::check_capacity(std::size_t{1} << 62, "x"),
                    Catch::Matchers::Contains("x: capacity must be at most"));
}

TEST_CASE("ring_control::storage_for rejects sizes that overflow std::size_t (device_queue's allocation sizes)",
          "[ring]") {
  const auto fits = dflash::ring_control::storage_for(100, 12, "q");
  CHECK(fits.sequence == 800);
  CHECK(fits.slots == 1200);
  const std::size_t max_cap = dflash::ring_control::max_capacity;
  // 2^61 slots pass check_capacity, but 2^61 * 8 bytes wrap to 0.
  CHECK_THROWS_AS(dflash::ring_control::storage_for(max_cap, 8, "dflash::device_queue"), std::length_error);
  CHECK_THROWS_WITH(dflash::ring_control::storage_for(max_cap, 8, "dflash::device_queue"),
                    Catch::Matchers::Contains("dflash::device_queue: 2305843009213693952 slots of 8 bytes"));
  CHECK_THROWS_AS(dflash::ring_control::storage_for(max_cap, 1, "q"), std::length_error);  // the sequence words overflow
  CHECK_THROWS_AS(dflash::ring_control::storage_for(std::size_t{1} << 40, std::size_t{1} << 30, "q"), std::length_error);
  CHECK_THROWS_AS(dflash::ring_control::storage_for(0, 8, "q"), std::invalid_argument);  // capacity checked first
  const std::size_t most = static_cast<std::size_t>(-1) / 8;  // the largest that fits with 8-byte slots
  CHECK(dflash::ring_control::storage_for(std::min(most, max_cap) / 2, 8, "q").slots == std::min(most, max_cap) / 2 * 8);
}

TEST_CASE("ring: batches go in whole or not at all, and come out in order", "[ring]") {
  host_ring<int> r(4);
  const int a[] = {1, 2, 3};
  const int b[] = {4, 5};
  REQUIRE(r.try_push(a, 3) == ring_status::ok);
  CHECK(r.size_approx() == 3);
  CHECK(r.try_push(b, 2) == ring_status::full);  // 1 slot free: nothing written
  CHECK(r.size_approx() == 3);
  CHECK(r.try_push(b, 5) == ring_status::too_large);
  int out[4] = {};
  auto t = r.try_pop(out, 2);
  REQUIRE(t.status == ring_status::ok);
  CHECK(t.count == 2);
  CHECK(t.first == 0);
  CHECK(out[0] == 1);
  CHECK(out[1] == 2);
  REQUIRE(r.try_push(b, 2) == ring_status::ok);  // wraps: positions 3, 4 -> slots 3, 0
  t = r.try_pop(out, 4);
  REQUIRE(t.status == ring_status::ok);
  CHECK(t.first == 2);
  REQUIRE(t.count == 3);
  CHECK(out[0] == 3);
  CHECK(out[1] == 4);
  CHECK(out[2] == 5);
  CHECK(r.try_pop(out, 4).status == ring_status::empty);
  CHECK(r.try_push(a, 0) == ring_status::ok);  // empty batch is a no-op
  CHECK(r.size_approx() == 0);
}

TEST_CASE("ring: many laps keep exact contents (wrap-around)", "[ring]") {
  host_ring<std::uint32_t> r(5);  // not a power of two on purpose
  std::uint32_t next_in = 0, next_out = 0;
  for (int lap = 0; lap < 1000; ++lap) {
    const std::uint32_t n = 1 + static_cast<std::uint32_t>(lap % 5);
    std::uint32_t in[5];
    for (std::uint32_t i = 0; i < n; ++i) in[i] = next_in + i;
    REQUIRE(r.try_push(in, n) == ring_status::ok);
    next_in += n;
    std::uint32_t out[5];
    std::uint32_t got = 0;
    while (got < n) {
      const auto t = r.try_pop(out, 3);
      REQUIRE(t.status == ring_status::ok);
      for (std::uint32_t i = 0; i < t.count; ++i) REQUIRE(out[i] == next_out++);
      got += t.count;
    }
  }
  CHECK(next_out == next_in);
}

TEST_CASE("ring: a reserved but unpublished slot blocks readers behind it", "[ring]") {
  dflash::ring_header h{};
  std::array<unsigned long long, 4> seq{};
  const dflash::ring_control ctl(&h, seq.data(), seq.size());
  ctl.init_header();
  for (unsigned long long i = 0; i < seq.size(); ++i) ctl.init_slot(i);

  const auto w = ctl.try_reserve_push(2);
  REQUIRE(w.status == ring_status::ok);
  CHECK(w.first == 0);
  ctl.publish(1);  // the second item is ready, the first is not
  CHECK(ctl.try_reserve_pop(4).status == ring_status::empty);
  ctl.close();  // closed, but a reserved item is still being written
  CHECK(ctl.try_reserve_push(1).status == ring_status::closed);
  CHECK(ctl.try_reserve_pop(4).status == ring_status::empty);
  ctl.publish(0);
  const auto r = ctl.try_reserve_pop(4);
  REQUIRE(r.status == ring_status::ok);
  CHECK(r.count == 2);
  ctl.release(0);
  ctl.release(1);
  CHECK(ctl.try_reserve_pop(4).status == ring_status::closed);
}

TEST_CASE("ring: a pop of at least n takes n or more published rows, or none", "[ring]") {
  dflash::ring_header h{};
  std::array<unsigned long long, 8> seq{};
  const dflash::ring_control ctl(&h, seq.data(), seq.size());
  ctl.init_header();
  for (unsigned long long i = 0; i < seq.size(); ++i) ctl.init_slot(i);

  const auto w = ctl.try_reserve_push(5);
  REQUIRE(w.status == ring_status::ok);
  for (unsigned long long i = 0; i < 3; ++i) ctl.publish(i);  // 3 written, 2 still being written
  const auto none = ctl.try_reserve_pop(4, 4);
  CHECK(none.status == ring_status::empty);
  CHECK(none.count == 0);
  const auto two = ctl.try_reserve_pop(2, 5);  // at_least above max_n asks for max_n; nothing was taken above
  REQUIRE(two.status == ring_status::ok);
  CHECK(two.first == 0);
  CHECK(two.count == 2);
  CHECK(ctl.try_reserve_pop(4, 2).status == ring_status::empty);  // only position 2 is written
  ctl.publish(3);
  ctl.publish(4);
  const auto three = ctl.try_reserve_pop(4, 3);
  REQUIRE(three.status == ring_status::ok);
  CHECK(three.first == 2);
  CHECK(three.count == 3);
  CHECK(ctl.try_reserve_pop(4, 1).status == ring_status::empty);
}

TEST_CASE("ring: close fails pushes, pops drain and then report closed", "[ring]") {
  host_ring<int> r(8);
  const int a[] = {1, 2, 3};
  REQUIRE(r.try_push(a, 3) == ring_status::ok);
  r.close();
  CHECK(r.closed());
  CHECK(r.try_push(a, 1) == ring_status::closed);
  int out[8];
  const auto t = r.try_pop(out, 8);
  REQUIRE(t.status == ring_status::ok);
  CHECK(t.count == 3);
  CHECK(r.try_pop(out, 8).status == ring_status::closed);
}

namespace {
struct item {
  std::uint32_t producer;
  std::uint32_t seq;
};

// Producers push batches of 1..8 (as warps with uneven lane counts would);
// consumers pop up to 5 at a time until the ring reports closed.
void ring_round(std::size_t capacity, std::uint32_t producers, std::uint32_t consumers, std::uint32_t per,
                std::uint32_t max_batch = 8) {
  host_ring<item> r(capacity);
  std::vector<std::atomic<int>> hits(static_cast<std::size_t>(producers) * per);
  std::atomic<bool> order_ok{true}, status_ok{true};
  std::vector<std::thread> ps, cs;
  for (std::uint32_t c = 0; c < consumers; ++c)
    cs.emplace_back([&] {
      std::vector<std::int64_t> last(producers, -1);
      item out[5];
      const std::uint32_t pop_n = std::min<std::uint32_t>(5, max_batch);
      for (;;) {
        const auto t = r.try_pop(out, pop_n);
        if (t.status == ring_status::closed) break;
        if (t.status == ring_status::empty) {
          std::this_thread::yield();
          continue;
        }
        if (t.status != ring_status::ok) status_ok = false;
        for (std::uint32_t i = 0; i < t.count; ++i) {
          const item& it = out[i];
          if (static_cast<std::int64_t>(it.seq) <= last[it.producer]) order_ok = false;
          last[it.producer] = it.seq;
          hits[static_cast<std::size_t>(it.producer) * per + it.seq].fetch_add(1, std::memory_order_relaxed);
        }
      }
    });
  for (std::uint32_t p = 0; p < producers; ++p)
    ps.emplace_back([&, p] {
      item batch[8];
      std::uint32_t i = 0, round = 0;
      while (i < per) {
        const std::uint32_t n = std::min<std::uint32_t>(1 + (round++ * 7 + p) % max_batch, per - i);
        for (std::uint32_t j = 0; j < n; ++j) batch[j] = {p, i + j};
        ring_status s;
        while ((s = r.try_push(batch, n)) == ring_status::full) std::this_thread::yield();
        if (s != ring_status::ok) status_ok = false;
        i += n;
      }
    });
  for (auto& t : ps) t.join();
  r.close();
  for (auto& t : cs) t.join();
  CHECK(order_ok.load());
  CHECK(status_ok.load());
  std::size_t lost = 0, dup = 0;
  for (auto& h : hits) {
    lost += h.load() == 0;
    dup += h.load() > 1;
  }
  CHECK(lost == 0);
  CHECK(dup == 0);
  CHECK(r.size_approx() == 0);
}
}  // namespace

TEST_CASE("ring MPMC on host threads: 2 x 2, small ring", "[ring]") { ring_round(16, 2, 2, 20'000); }

TEST_CASE("ring MPMC on host threads: 2 x 2, capacity 1 and 2", "[ring]") {
  ring_round(1, 2, 2, 5'000, 1);
  ring_round(2, 2, 2, 5'000, 2);
}

TEST_CASE("stress: ring control, 4 producers x 4 consumers x 250000 items", "[ring][stress]") {
  ring_round(64, 4, 4, 250'000);
}
