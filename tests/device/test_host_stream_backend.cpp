// The host twin behaves like a CUDA stream/event pair: work runs later, on
// another thread, in order; waits order streams; errors are sticky.
#include <catch2/catch.hpp>
#include <dflash/device/device_stream.hpp>
#include <dflash/device/gpu_timer.hpp>
#include <dflash/device/host_stream_backend.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;

TEST_CASE("host twin: enqueued work runs later, on the stream's own thread, in order", "[device][twin]") {
  watchdog wd("twin order");
  B b;
  auto s = b.create_stream();
  std::atomic<bool> gate{false};
  std::vector<int> seen;  // written only by the stream thread
  std::thread::id ran_on{};
  b.enqueue(s, [&] {
    while (!gate.load()) std::this_thread::yield();
    ran_on = std::this_thread::get_id();
  });
  for (int i = 0; i < 100; ++i) b.enqueue(s, [&seen, i] { seen.push_back(i); });
  auto e = b.create_event(false);
  b.record(e, s);
  CHECK_FALSE(b.query(e));  // nothing ran yet: the first task is gated
  gate = true;
  b.host_wait(e);
  CHECK(ran_on != std::this_thread::get_id());
  REQUIRE(seen.size() == 100);
  for (int i = 0; i < 100; ++i) CHECK(seen[static_cast<std::size_t>(i)] == i);
  b.destroy_event(e);
  b.destroy_stream(s);
  CHECK(b.stats().host_waits == 1);
  CHECK(b.stats().synchronizes == 0);
}

TEST_CASE("host twin: wait(s2, e) orders s2 after the work e captured; the host does not block", "[device][twin]") {
  watchdog wd("twin wait");
  B b;
  auto s1 = b.create_stream(), s2 = b.create_stream();
  auto e = b.create_event(false);
  std::atomic<bool> gate{false};
  int value = 0;  // written on s1, read on s2: ordered only by the event
  b.enqueue(s1, [&] {
    while (!gate.load()) std::this_thread::yield();
    value = 42;
  });
  b.record(e, s1);
  b.wait(s2, e);  // returns at once although s1 is blocked
  int read = -1;
  b.enqueue(s2, [&] { read = value; });
  auto done = b.create_event(false);
  b.record(done, s2);
  std::this_thread::sleep_for(20ms);
  CHECK_FALSE(b.query(done));  // s2 is held back by the wait
  gate = true;
  b.host_wait(done);
  CHECK(read == 42);
  b.destroy_event(e);
  b.destroy_event(done);
  b.destroy_stream(s1);
  b.destroy_stream(s2);
}

TEST_CASE("host twin: re-recording an event does not move an earlier wait's target", "[device][twin]") {
  watchdog wd("twin re-record");
  B b;
  auto s1 = b.create_stream(), s2 = b.create_stream(), s3 = b.create_stream();
  auto e = b.create_event(false);
  std::atomic<bool> gate1{false};
  std::atomic<int> order{0};
  int first_done_at = -1, waiter_ran_at = -1;
  b.enqueue(s1, [&] {
    while (!gate1.load()) std::this_thread::yield();
    first_done_at = order.fetch_add(1);
  });
  b.record(e, s1);   // record #1 (blocked behind gate1)
  b.wait(s2, e);     // captures record #1
  b.record(e, s3);   // record #2 on an idle stream: completes at once
  b.synchronize(s3);
  b.enqueue(s2, [&] { waiter_ran_at = order.fetch_add(1); });
  std::this_thread::sleep_for(20ms);
  gate1 = true;
  b.synchronize(s2);
  CHECK(first_done_at == 0);
  CHECK(waiter_ran_at == 1);  // waited for record #1, not #2
  b.destroy_event(e);
  for (auto s : {s1, s2, s3}) b.destroy_stream(s);
}

TEST_CASE("host twin: a throw in enqueued work poisons the stream and the streams that wait on it", "[device][twin]") {
  watchdog wd("twin errors");
  B b;
  auto s1 = b.create_stream(), s2 = b.create_stream();
  auto e = b.create_event(false);
  bool later_ran = false, s2_ran = false;
  b.enqueue(s1, [] { throw std::runtime_error("kernel fault"); });
  b.enqueue(s1, [&] { later_ran = true; });
  b.record(e, s1);
  b.wait(s2, e);
  b.enqueue(s2, [&] { s2_ran = true; });
  CHECK_THROWS_WITH(b.synchronize(s2), "kernel fault");
  CHECK_THROWS_WITH(b.check(s1), "kernel fault");
  CHECK_THROWS_WITH(b.host_wait(e), "kernel fault");
  CHECK_FALSE(later_ran);
  CHECK_FALSE(s2_ran);
  b.destroy_event(e);
  b.destroy_stream(s1);
  b.destroy_stream(s2);
}

TEST_CASE("host twin: deallocate is stream-ordered; timing events give elapsed time", "[device][twin]") {
  watchdog wd("twin memory");
  B b;
  auto s = b.create_stream();
  auto* p = static_cast<int*>(b.allocate(64 * sizeof(int), s));
  auto a = b.create_event(true), z = b.create_event(true);
  b.record(a, s);
  b.enqueue(s, [p] {
    std::this_thread::sleep_for(5ms);
    for (int i = 0; i < 64; ++i) p[i] = i;  // ASan: a use after free if deallocate ran early
  });
  b.record(z, s);
  b.deallocate(p, s);
  b.synchronize(s);
  CHECK(b.elapsed(a, z) >= 4ms);
  CHECK(b.stats().timing_events == 2);
  b.destroy_event(a);
  b.destroy_event(z);
  b.destroy_stream(s);
}

TEST_CASE("host twin: a copy from or to null poisons the stream, as cudaMemcpyAsync's error would surface",
          "[device][twin]") {
  watchdog wd("twin null copy");
  B b;
  auto s = b.create_stream();
  int src[4] = {1, 2, 3, 4}, dst[4] = {};
  b.copy(nullptr, src, sizeof src, s);  // killed the process on the stream thread before it was validated
  CHECK_THROWS_WITH(b.synchronize(s), Catch::Contains("destination is null"));
  auto s2 = b.create_stream();
  b.copy(dst, nullptr, sizeof dst, s2);
  CHECK_THROWS_WITH(b.synchronize(s2), Catch::Contains("source is null"));
  b.copy(nullptr, nullptr, 0, s);  // zero bytes: nothing to validate, as in CUDA
  b.destroy_stream(s);
  b.destroy_stream(s2);
}

TEST_CASE("device_buffer / host_buffer: a size whose bytes overflow size_t is a length_error, not a tiny block",
          "[device][twin]") {
  B b;
  auto st = b.create_stream();
  const dflash::device_stream<B> s(b, st);
  dflash::device_buffer<double, B> d;
  dflash::host_buffer<double, B> h;
  const std::size_t huge = (std::size_t{1} << 61) + 1;  // * 8 wraps to 8 bytes
  CHECK_THROWS_AS(d.ensure(huge, s), std::length_error);
  CHECK_THROWS_AS(h.ensure(huge, b), std::length_error);
  CHECK(d.size() == 0);  // nothing changed: no size that the memory does not back
  CHECK(h.size() == 0);
  CHECK(d.ensure(3, s) != nullptr);
  CHECK(d.size() == 3);
  b.synchronize(st);
  b.destroy_stream(st);
}

TEST_CASE("host twin: the stream's thread is labelled after the thread that enqueues its work", "[device][twin]") {
  watchdog wd("twin label");
  B b;
  auto s = b.create_stream();
  std::string seen;  // written by the stream thread, read after sync
  std::thread worker([&] {
    dflash::detail::thread_label() = "postprocess#0";
    b.enqueue(s, [&] { seen = dflash::detail::thread_label(); });
    b.synchronize(s);
  });
  worker.join();
  CHECK(seen == "postprocess#0 work (host twin)");
  b.destroy_stream(s);
}

namespace {
// The host twin counting live events, with an event creation that fails on demand.
struct event_counting_backend : dflash::host_stream_backend {
  int live = 0;
  int create_fails_in = 0;  // n > 0: the n-th create_event from now throws
  event_type create_event(bool timing) {
    if (create_fails_in > 0 && --create_fails_in == 0) throw std::runtime_error("injected: out of events");
    ++live;
    return host_stream_backend::create_event(timing);
  }
  void destroy_event(event_type e) noexcept {
    --live;
    host_stream_backend::destroy_event(e);
  }
};
}  // namespace

TEST_CASE("gpu_timer: an event pair that cannot be completed leaks neither event", "[device][timer]") {
  for (int fail_at : {1, 2}) {  // the pair's first or its second event
    CAPTURE(fail_at);
    event_counting_backend b;
    auto st = b.create_stream();
    {
      dflash::detail::gpu_timer<event_counting_backend> t(b);
      b.create_fails_in = fail_at;
      CHECK_THROWS_WITH(t.start(st), Catch::Contains("injected"));
      t.start(st);  // the next start makes its pair
      t.stop(st);
      b.synchronize(st);
    }
    CHECK(b.live == 0);
    b.destroy_stream(st);
  }
}
