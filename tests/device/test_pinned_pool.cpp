// pinned_pool on the asynchronous host twin: a block given back with a stream is reused only
// after that stream's work on it; the per-item path allocates nothing from the backend once
// warm; the bound is never passed; blocks handed out at once never overlap.
#include <catch2/catch.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/device/pinned_pool.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <optional>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

using B = dflash::host_stream_backend;
using pool_t = dflash::pinned_pool<B>;

TEST_CASE("a block given back with a stream is reused only after that stream's work", "[pinned_pool]") {
  watchdog wd("pinned_pool reuse");
  B backend;
  auto s = backend.create_stream();
  {
    pool_t pool(backend, 1 << 20);
    auto a = pool.acquire(1000);
    CHECK(a.size() == 1024);
    void* first = a.data();
    std::promise<void> gate;
    backend.enqueue(s, [f = gate.get_future().share()] { f.wait(); });  // work still using the block
    pool.give_back(std::move(a), s);
    CHECK_FALSE(a);

    auto b = pool.acquire(1000);  // the first block's work is pending: a new one
    CHECK(b.data() != first);
    CHECK(pool.stats().allocations == 2);
    gate.set_value();
    backend.synchronize(s);
    b.reset();  // dropped without a stream: reusable at once

    auto c = pool.acquire(900);
    auto d = pool.acquire(1024);
    CHECK(pool.stats().allocations == 2);  // both from the cache
    CHECK(pool.stats().reuses == 2);
    CHECK(((c.data() == first) != (d.data() == first)));
    CHECK(pool.stats().bytes_in_use == 2048);
    CHECK(pool.stats().high_water == 2048);
  }
  backend.destroy_stream(s);
}

TEST_CASE("a block marked used_on a stream and dropped later is reused only after that work", "[pinned_pool]") {
  watchdog wd("pinned_pool used_on");
  B backend;
  auto s = backend.create_stream();
  {
    pool_t pool(backend, 1 << 20);
    auto a = pool.acquire(1000);
    void* first = a.data();
    std::promise<void> gate;
    backend.enqueue(s, [f = gate.get_future().share()] { f.wait(); });  // the copy into the block, pending
    a.used_on(s);
    backend.enqueue(s, [] {});  // later work on s: not the block's
    a.reset();                  // the host is done with it before the stream is
    auto b = pool.acquire(1000);
    CHECK(b.data() != first);  // its marked work is pending: not reused
    gate.set_value();
    backend.synchronize(s);
    b.reset();
    auto c = pool.acquire(1000);
    auto d = pool.acquire(1000);
    CHECK(((c.data() == first) || (d.data() == first)));  // reused once the work completed
    CHECK(pool.stats().allocations == 2);
  }
  backend.destroy_stream(s);
}

TEST_CASE("a block marked on one stream and given back on another waits for both", "[pinned_pool]") {
  watchdog wd("pinned_pool two marks");
  B backend;
  auto s1 = backend.create_stream(), s2 = backend.create_stream();
  {
    pool_t pool(backend, 1 << 20);
    auto a = pool.acquire(1000);
    void* first = a.data();
    std::promise<void> gate1;
    backend.enqueue(s1, [f = gate1.get_future().share()] { f.wait(); });  // pending on s1
    a.used_on(s1);
    pool.give_back(std::move(a), s2);  // s2 has no work of its own: it waits for s1's mark first
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // s2 would be done by now had it not
    auto b = pool.acquire(1000);
    CHECK(b.data() != first);  // s1's work is still pending
    gate1.set_value();
    backend.synchronize(s1);
    backend.synchronize(s2);
    auto c = pool.acquire(1000);
    CHECK(c.data() == first);
    CHECK_THROWS_AS(pool_t::block{}.used_on(s1), std::logic_error);
  }
  backend.destroy_stream(s1);
  backend.destroy_stream(s2);
}

TEST_CASE("once warm, the per-item path allocates no pinned memory from the backend; at the bound it waits",
          "[pinned_pool]") {
  watchdog wd("pinned_pool per item");
  B backend;
  auto s = backend.create_stream();
  std::vector<std::uint8_t> src(5000, 7);
  {
    pool_t pool(backend, 64 << 10);
    // The stream held back: 16 blocks of 4 KiB fill the bound with work pending on each.
    std::promise<void> gate;
    backend.enqueue(s, [f = gate.get_future().share()] { f.wait(); });
    for (int i = 0; i < 16; ++i) {
      auto blk = pool.acquire(4096);
      backend.copy(blk.data(), src.data(), 4096, s);
      pool.give_back(std::move(blk), s);
    }
    CHECK_FALSE(pool.try_acquire(4096));  // try_acquire never waits
    auto opener = std::async(std::launch::async, [&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      gate.set_value();
    });
    { auto blk = pool.acquire(4096); }  // waits for the stream instead of failing or allocating
    opener.get();
    for (int i = 0; i < 2000 - 17; ++i) {
      auto blk = pool.acquire(3000 + static_cast<std::size_t>(i % 1000));  // one size class: 4 KiB
      backend.copy(blk.data(), src.data(), 3000, s);                         // asynchronous, on s
      pool.give_back(std::move(blk), s);
    }
    backend.synchronize(s);
    const auto st = pool.stats();
    CHECK(st.allocations <= 16);  // 64 KiB of 4 KiB blocks: at most 16, however far s lags behind
    CHECK(st.allocations + st.reuses == 2000);
    CHECK(backend.stats().host_allocations == st.allocations);
    CHECK(st.bytes_in_use == 0);
    CHECK(st.high_water == 4096);
  }
  backend.destroy_stream(s);
}

TEST_CASE("the bound is never passed: refused with a message, cached blocks freed to make room", "[pinned_pool]") {
  B backend;
  pool_t pool(backend, 4096);
  std::vector<pool_t::block> held;
  for (int i = 0; i < 4; ++i) held.push_back(pool.acquire(1024));
  CHECK_FALSE(pool.try_acquire(1));
  CHECK_THROWS_AS(pool.acquire(1), std::length_error);
  CHECK_THROWS_WITH(pool.acquire(1), Catch::Contains("would pass the bound of 4096 bytes: 4096 in use"));
  held.pop_back();  // back, finished: cached
  CHECK(pool.acquire(100).size() == 256);  // no 256-byte block cached: the 1 KiB one is freed for it
  CHECK(pool.stats().frees == 1);
  CHECK(pool.stats().bytes_in_use + pool.stats().bytes_cached <= 4096);
  CHECK_THROWS_AS(pool_t(backend, 100), std::invalid_argument);
  CHECK_THROWS_AS(pool.acquire(std::size_t{1} << 63), std::length_error);
  CHECK(pool_t::size_class(0) == 256);
  CHECK(pool_t::size_class(257) == 512);
}

TEST_CASE("pinned_pool under contention: blocks in use never overlap, every block comes back (seeded)",
          "[pinned_pool][stress]") {
  watchdog wd("pinned_pool contention");
  B backend;
  constexpr int threads = 4, rounds = 400;
  std::atomic<int> refused{0}, broken{0};
  {
    pool_t pool(backend, 256 << 10);
    std::vector<std::thread> ts;
    for (int t = 0; t < threads; ++t)
      ts.emplace_back([&, t] {
        std::mt19937 rng(static_cast<unsigned>(1234 + t));  // replay: the seed is the thread's index
        auto s = backend.create_stream();
        for (int r = 0; r < rounds; ++r) {
          const std::size_t n = 1 + rng() % 20000;
          // acquire waits at the bound (4 threads hold at most 4 x 32 KiB: it never has to throw)
          auto blk = rng() % 2 ? std::optional<pool_t::block>(pool.acquire(n)) : pool.try_acquire(n);
          if (!blk) {
            ++refused;
            backend.synchronize(s);
            continue;
          }
          auto* p = static_cast<std::uint8_t*>(blk->data());
          const auto tag = static_cast<std::uint8_t>(t * 50 + r % 50);
          std::memset(p, tag, n);
          backend.enqueue(s, [p, n, tag, &broken] {  // the stream reads the block later
            for (std::size_t i = 0; i < n; ++i)
              if (p[i] != tag) {
                ++broken;
                return;
              }
          });
          if (rng() % 2) pool.give_back(std::move(*blk), s);
          else {
            backend.synchronize(s);
            blk->reset();
          }
        }
        backend.synchronize(s);
        backend.destroy_stream(s);
      });
    for (auto& th : ts) th.join();
    const auto st = pool.stats();
    CHECK(st.bytes_in_use == 0);
    CHECK(st.bytes_cached <= 256 << 10);
    CHECK(st.allocations + st.reuses + static_cast<std::uint64_t>(refused.load()) == threads * rounds);
  }
  CHECK(broken.load() == 0);  // a block reused while a stream still read it would show here
}
