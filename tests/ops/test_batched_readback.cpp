#include <catch2/catch.hpp>
#include <dflash/ops/batched_readback.hpp>
#include <dflash/profile.hpp>

#include <cstdint>
#include <stdexcept>
#include <vector>

using dflash::ops::batched_readback;
using dflash::ops::host_batched_readback;
using dflash::ops::host_readback_backend;
using dflash::ops::readback_source;

namespace {
/// Host backend that counts calls and lets the test decide when "copies" land.
struct counting_backend : host_readback_backend {
  struct event_type {
    int id = -1;
  };
  struct counters {
    int gathers = 0, copies = 0, records = 0, syncs = 0, events = 0;
    std::vector<bool> landed;
  };
  counters* c;

  explicit counting_backend(counters& cs) : c(&cs) {}
  event_type create_event() {
    c->landed.push_back(true);
    return {c->events++};
  }
  void destroy_event(event_type) noexcept {}
  void gather(std::byte* d, const readback_source* s, std::size_t n, stream_type st) {
    ++c->gathers;
    host_readback_backend::gather(d, s, n, st);
  }
  void copy_to_host(std::byte* d, const std::byte* s, std::size_t n, stream_type st) {
    ++c->copies;
    host_readback_backend::copy_to_host(d, s, n, st);
  }
  void record(event_type e, stream_type) { ++c->records; c->landed[static_cast<std::size_t>(e.id)] = false; }
  bool query(event_type e) { return c->landed[static_cast<std::size_t>(e.id)]; }
  void synchronize(event_type e) { ++c->syncs; c->landed[static_cast<std::size_t>(e.id)] = true; }
};
static_assert(dflash::ops::ReadbackBackend<counting_backend>);
}  // namespace

TEST_CASE("host read-back returns slot values and staged scalars", "[readback]") {
  host_batched_readback rb(4);
  *rb.slot<float>(0) = 1.5f;
  *rb.slot<std::int32_t>(1) = -7;
  const std::int64_t tokens = 1ll << 40;
  const double acc = 0.625;
  rb.stage(2, &tokens);
  rb.stage(3, &acc);
  auto h = rb.submit();
  CHECK(h.valid());
  CHECK(h.ready());
  CHECK(h.get<float>(0) == 1.5f);
  CHECK(h.get<std::int32_t>(1) == -7);
  CHECK(h.get<std::int64_t>(2) == (1ll << 40));
  CHECK(h.get<double>(3) == 0.625);
  *rb.slot<std::uint32_t>(0) = 5;
  CHECK(h.get<float>(0) == 1.5f);  // the handle holds the values of its own submit
  CHECK(rb.submit().values<std::uint32_t>()[0] == 5u);
}

TEST_CASE("each submit is one gather, one copy and one event; unstaged submits skip the gather", "[readback]") {
  counting_backend::counters c;
  batched_readback<counting_backend> rb(16, 2, counting_backend(c));
  float loss = 2.0f, acc = 0.5f;
  std::int32_t n = 3;
  rb.stage(0, &loss);
  rb.stage(1, &acc);
  rb.stage(2, &n);
  auto h = rb.submit();
  CHECK(c.gathers == 1);
  CHECK(c.copies == 1);
  CHECK(c.records == 1);
  CHECK_FALSE(h.ready());
  CHECK(c.syncs == 0);
  h.wait();
  CHECK(h.ready());
  CHECK(h.values<float>()[1] == 0.5f);
  rb.clear_staged();
  *rb.slot<float>(5) = 9.0f;
  auto h2 = rb.submit();
  CHECK(c.gathers == 1);
  CHECK(c.copies == 2);
  CHECK(h2.get<float>(5) == 9.0f);
  CHECK(h2.get<float>(0) == 2.0f);  // staging keeps the last gathered value
}

TEST_CASE("staging a slot again replaces its source", "[readback]") {
  counting_backend::counters c;
  batched_readback<counting_backend> rb(4, 2, counting_backend(c));
  float old_loss = 1.0f, loss = 2.0f, acc = 0.5f;
  rb.stage(1, &old_loss);
  rb.stage(2, &acc);
  for (int step = 0; step < 10; ++step) rb.stage(1, &loss);  // as a train loop stages each step
  CHECK(rb.staged() == 2);
  auto h = rb.submit();
  CHECK(h.get<float>(1) == 2.0f);
  CHECK(h.get<float>(2) == 0.5f);
  rb.clear_staged();
  CHECK(rb.staged() == 0);
  rb.stage(2, &loss);  // cleared: a fresh source, not a replacement of a stale entry
  CHECK(rb.staged() == 1);
  CHECK(rb.submit().get<float>(2) == 2.0f);
}

TEST_CASE("depth bounds the in-flight submissions and stale handles throw", "[readback]") {
  counting_backend::counters c;
  batched_readback<counting_backend> rb(1, 2, counting_backend(c));
  *rb.slot<int>(0) = 1;
  auto h1 = rb.submit();
  *rb.slot<int>(0) = 2;
  auto h2 = rb.submit();
  CHECK(c.syncs == 0);  // two buffers, two in flight, nobody waited
  *rb.slot<int>(0) = 3;
  auto h3 = rb.submit();  // reuses h1's buffer: waits for it first
  CHECK(c.syncs == 1);
  CHECK_THROWS_AS(h1.get<int>(0), std::logic_error);
  CHECK_THROWS_WITH(h1.ready(), Catch::Contains("stale handle"));
  CHECK(h2.get<int>(0) == 2);
  CHECK(h3.get<int>(0) == 3);
  CHECK_THROWS_AS(dflash::ops::readback_handle<counting_backend>{}.wait(), std::logic_error);
}

TEST_CASE("read-back rejects bad arguments", "[readback]") {
  CHECK_THROWS_WITH(host_batched_readback(0), Catch::Contains("needs at least one slot"));
  CHECK_THROWS_WITH(host_batched_readback(2, 0), Catch::Contains("depth must be positive"));
  host_batched_readback rb(2);
  CHECK_THROWS_WITH(rb.slot<float>(2), Catch::Contains("slot 2 out of range (size 2)"));
  const float* null = nullptr;
  CHECK_THROWS_WITH(rb.stage(0, null), Catch::Contains("source pointer is null"));
  float x = 0;
  CHECK_THROWS_AS(rb.stage(5, &x), std::invalid_argument);
  CHECK_THROWS_AS(rb.submit().get<float>(9), std::invalid_argument);
}

TEST_CASE("submit records under the readback key", "[readback][profile]") {
  dflash::AccumulatingProfiler<dflash::ops::keys> prof;
  host_batched_readback rb(1);
  (void)rb.submit(host_readback_backend::stream_type{}, dflash::profiler_ref(prof));
  (void)rb.submit(host_readback_backend::stream_type{}, dflash::profiler_ref(prof));
  CHECK(prof.snapshot().find("readback")->count == 2);
}
