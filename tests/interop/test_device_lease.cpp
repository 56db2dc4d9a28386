// device_lease on the asynchronous host twin: a popped slot held outside any stage goes back to
// its channel when the last copy of the lease goes, after the work of every stream that used it.
#include <catch2/catch.hpp>
#include <dflash/device/device_channel.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/interop/device_lease.hpp>

#include "watchdog.hpp"

#include <chrono>
#include <future>
#include <memory>
#include <stdexcept>
#include <utility>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;

namespace {
struct slot : dflash::device_item<B> {
  dflash::device_buffer<int, B> data;
};
using channel = dflash::device_channel<slot>;
using lease = dflash::device_lease<channel>;
}  // namespace

TEST_CASE("device_lease: copies share the slot; it returns after the last one and its users' work", "[lease]") {
  watchdog wd("device_lease");
  B backend;
  auto ps = backend.create_stream(), ls = backend.create_stream(), cs = backend.create_stream();
  {
    auto ch = std::make_shared<channel>(backend, 1);
    const DS prod(backend, ps), at(backend, ls);
    auto r = ch->acquire(prod);
    REQUIRE(r);
    int* d = r->item().data.ensure(1, prod);
    std::promise<void> fill_gate;
    prod.enqueue([d, g = fill_gate.get_future().share()] {
      g.wait();
      *d = 5;
    });
    REQUIRE(ch->publish(std::move(*r), prod));

    auto l = lease::pop(ch, at);
    REQUIRE(l);
    auto copy = *l;
    CHECK(l->holders() == 2);
    CHECK(&copy.item() == &l->item());

    std::promise<int> seen;
    l->ready_on(cs);
    backend.enqueue(cs, [d, &seen] { seen.set_value(*d); });
    l->used_on(cs);
    auto next = std::async(std::launch::async, [&] { return ch->acquire(prod); });
    l.reset();
    CHECK(next.wait_for(50ms) == std::future_status::timeout);  // `copy` still holds it
    { auto gone = std::move(copy); }
    auto again = next.get();
    REQUIRE(again);
    prod.enqueue([d] { *d = -1; });  // ordered after the consumer's read by the lease's joins
    fill_gate.set_value();
    CHECK(seen.get_future().get() == 5);
    ch->abandon(std::move(*again), prod);
    for (auto s : {ps, ls, cs}) backend.synchronize(s);
  }
  CHECK_THROWS_AS(lease::pop(nullptr, DS(backend, ls)), std::invalid_argument);
  for (auto s : {ps, ls, cs}) backend.destroy_stream(s);
}
