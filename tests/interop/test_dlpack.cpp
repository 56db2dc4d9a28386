// DLPack export on the asynchronous host twin: the exported pointer is the item's or the slot's
// own (zero copy), a consumer stream waits for the producer's work before it reads, a slot is
// reused only after every tensor over it is dropped and its consumer's work is done, and a
// tensor dropped early, late (after its channel's owner let go), twice or never loses nothing.
#include <catch2/catch.hpp>
#include <dflash/device/device_channel.hpp>
#include <dflash/device/host_stream_backend.hpp>
#include <dflash/interop/dlpack.hpp>

#include "watchdog.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <memory>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;
using B = dflash::host_stream_backend;
using DS = dflash::device_stream<B>;
namespace dl = dflash::dlpack;

namespace {
constexpr int poison = -7;
constexpr std::size_t words = 64;

struct slot : dflash::device_item<B> {
  dflash::device_buffer<int, B> data;
};
using channel = dflash::device_channel<slot>;
using lease = dflash::device_lease<channel>;

// A gate the test opens: work enqueued behind it runs only then.
struct gate {
  std::promise<void> p;
  std::shared_future<void> f = p.get_future().share();
  void open() { p.set_value(); }
};

struct owner_count {
  std::atomic<int>* destroyed;
  std::vector<float> data;
  owner_count(std::atomic<int>* d, std::size_t n) : destroyed(d), data(n, 1.5f) {}
  owner_count(owner_count&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)), data(std::move(o.data)) {}
  ~owner_count() {
    if (destroyed) destroyed->fetch_add(1);
  }
};

struct streams {
  B backend;
  std::shared_ptr<channel> ch;
  B::stream_type prod_st, lease_st, cons_st;
  DS prod, at;
  streams(std::size_t depth)
      : ch(std::make_shared<channel>(backend, depth)), prod_st(backend.create_stream()),
        lease_st(backend.create_stream()), cons_st(backend.create_stream()), prod(backend, prod_st),
        at(backend, lease_st) {}
  ~streams() {
    for (auto s : {prod_st, lease_st, cons_st}) backend.synchronize(s);
    ch.reset();
    for (auto s : {prod_st, lease_st, cons_st}) backend.destroy_stream(s);
  }
  // Publishes a slot whose fill (value v) runs only once `g` opens; the slot is poisoned first.
  void publish(int v, std::shared_future<void> g) {
    auto r = ch->acquire(prod);
    REQUIRE(r);
    int* d = r->item().data.ensure(words, prod);
    // The twin's device memory is host memory: poison it here, before any work on the slot.
    for (std::size_t i = 0; i < words; ++i) d[i] = poison;
    prod.enqueue([d, v, g] {
      g.wait();
      for (std::size_t i = 0; i < words; ++i) d[i] = v + static_cast<int>(i);
    });
    REQUIRE(ch->publish(std::move(*r), prod));
  }
  // Reads the slot's first word on the consumer stream.
  std::shared_future<int> read_on_consumer(const int* d) {
    auto out = std::make_shared<std::promise<int>>();
    auto f = out->get_future().share();
    backend.enqueue(cons_st, [d, out] { out->set_value(d[0]); });
    return f;
  }
};
}  // namespace

TEST_CASE("dtype_of and row_major describe tensors as DLPack counts them", "[dlpack]") {
  CHECK(dl::dtype_of<float>().code == kDLFloat);
  CHECK(dl::dtype_of<float>().bits == 32);
  CHECK(dl::dtype_of<dflash::bf16>().code == kDLBfloat);
  CHECK(dl::dtype_of<dflash::bf16>().bits == 16);
  CHECK(dl::dtype_of<std::int32_t>().code == kDLInt);
  CHECK(dl::dtype_of<std::uint8_t>().code == kDLUInt);
  CHECK(dl::dtype_of<std::uint8_t>().bits == 8);
  const auto l = dl::row_major<float>({3, 4, 5});
  CHECK(l.strides == std::vector<std::int64_t>{20, 5, 1});
  CHECK(l.span() == 60);
  CHECK(dl::row_major<float>({3, 0}).span() == 0);
  CHECK_THROWS_WITH(dl::row_major<float>({3, -1}), Catch::Contains("negative"));
}

TEST_CASE("a host item moved into a tensor: zero copy, its owner destroyed once by the deleter", "[dlpack]") {
  std::atomic<int> destroyed{0};
  owner_count o(&destroyed, 12);
  float* p = o.data.data();
  DLManagedTensorVersioned* t = dl::export_owned(std::move(o), p, dl::row_major<float>({3, 4}), {kDLCPU, 0}, true);
  REQUIRE(t != nullptr);
  CHECK(t->version.major == DLPACK_MAJOR_VERSION);
  CHECK(t->dl_tensor.data == p);  // the item's memory, not a copy
  CHECK(t->dl_tensor.ndim == 2);
  CHECK(t->dl_tensor.shape[0] == 3);
  CHECK(t->dl_tensor.shape[1] == 4);
  CHECK(t->dl_tensor.strides[0] == 4);
  CHECK(t->dl_tensor.strides[1] == 1);
  CHECK(t->dl_tensor.device.device_type == kDLCPU);
  CHECK((t->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
  CHECK(static_cast<float*>(t->dl_tensor.data)[11] == 1.5f);
  CHECK(destroyed.load() == 0);  // the moved-from owner counts nothing
  // The consumer drops it on another thread, as a framework's garbage collector may.
  std::thread([t] { t->deleter(t); }).join();
  CHECK(destroyed.load() == 1);

  owner_count u(&destroyed, 4);
  float* q = u.data.data();
  DLManagedTensor* v = dl::export_owned_unversioned(std::move(u), q, dl::row_major<float>({4}));
  CHECK(v->dl_tensor.data == q);
  CHECK(v->dl_tensor.strides[0] == 1);
  v->deleter(v);
  CHECK(destroyed.load() == 2);
}

TEST_CASE("a bad layout is an error naming the problem, and nothing leaks", "[dlpack]") {
  std::atomic<int> destroyed{0};
  dl::tensor_layout l = dl::row_major<float>({2, 2});
  l.strides.pop_back();
  owner_count o(&destroyed, 4);
  float* p = o.data.data();
  CHECK_THROWS_WITH(dl::export_owned(std::move(o), p, l), Catch::Contains("2 extents but 1 strides"));
  CHECK(destroyed.load() == 1);  // the owner went with the failed call
  owner_count n(&destroyed, 4);
  CHECK_THROWS_WITH(dl::export_owned(std::move(n), nullptr, dl::row_major<float>({2})), Catch::Contains("null data"));
  CHECK_THROWS_WITH(dl::export_owned(0, nullptr, dl::tensor_layout{}), Catch::Contains("no element type"));
}

TEST_CASE("an exported slot: its consumer stream waits for the producer, the pointer is the slot's", "[dlpack][lease]") {
  watchdog wd("dlpack stream wait");
  streams h(2);
  gate g;  // destroyed before h: a fill still behind it is released (broken promise), not left hanging
  h.publish(100, g.f);
  auto l = lease::pop(h.ch, h.at);
  REQUIRE(l);
  int* d = l->item().data.data();
  SECTION("through the export, the consumer sees the producer's values") {
    DLManagedTensorVersioned* t = dl::export_lease(*l, d, dl::row_major<int>({static_cast<std::int64_t>(words)}), h.cons_st);
    CHECK(t->dl_tensor.data == d);  // zero copy: the slot's own memory
    CHECK(t->dl_tensor.device.device_type == kDLCPU);  // the twin's device memory is host memory
    auto seen = h.read_on_consumer(d);
    CHECK(seen.wait_for(50ms) == std::future_status::timeout);  // held until the fill ran
    g.open();
    CHECK(seen.get() == 100);
    t->deleter(t);
  }
  SECTION("control: a consumer stream that does not wait reads the slot before the fill") {
    auto seen = h.read_on_consumer(d);  // no ready_on: nothing orders it after the fill
    const int v = seen.get();
    g.open();
    CHECK(v == poison);
  }
}

TEST_CASE("a leased slot is reused only after every tensor over it is dropped and its consumer's work is done",
          "[dlpack][lease]") {
  watchdog wd("dlpack slot reuse");
  streams h(1);  // one slot: the producer's next acquire needs this very slot back
  gate first;
  first.open();
  h.publish(1, first.f);
  auto l = lease::pop(h.ch, h.at);
  REQUIRE(l);
  int* d = l->item().data.data();
  const auto layout = dl::row_major<int>({static_cast<std::int64_t>(words)});
  DLManagedTensorVersioned* a = dl::export_lease(*l, d, layout, h.cons_st);
  DLManagedTensor* b = dl::export_lease_unversioned(*l, d, layout, h.cons_st);  // exported twice
  CHECK(l->holders() == 3);
  l.reset();  // the batch object goes first: the tensors still hold the slot

  auto next = std::async(std::launch::async, [&] { return h.ch->acquire(h.prod); });
  CHECK(next.wait_for(50ms) == std::future_status::timeout);
  a->deleter(a);
  CHECK(next.wait_for(50ms) == std::future_status::timeout);  // b still holds it

  // Consumer work still reading the slot when the last tensor goes: the producer's next fill
  // must run after it.
  gate reader;
  auto seen = std::make_shared<std::promise<int>>();
  auto got = seen->get_future();
  h.backend.enqueue(h.cons_st, [d, seen, f = reader.f] {
    f.wait();
    seen->set_value(d[0]);
  });
  b->deleter(b);
  auto r = next.get();  // the handle comes back at once; the device order guards the data
  REQUIRE(r);
  CHECK(r->item().data.data() == d);
  h.prod.enqueue([d] { d[0] = poison; });  // the next producer's write
  reader.open();
  CHECK(got.get() == 1);  // read before the overwrite: the producer's stream waited for it
  h.ch->abandon(std::move(*r), h.prod);
}

TEST_CASE("a tensor dropped after its channel's owner let go still returns the slot; one never exported too",
          "[dlpack][lease]") {
  watchdog wd("dlpack late drop");
  std::atomic<int> seen{0};
  B backend;
  auto lease_st = backend.create_stream(), cons_st = backend.create_stream(), prod_st = backend.create_stream();
  DLManagedTensorVersioned* t = nullptr;
  {
    auto ch = std::make_shared<channel>(backend, 2);
    const DS prod(backend, prod_st), at(backend, lease_st);
    for (int k = 0; k < 2; ++k) {
      auto r = ch->acquire(prod);
      REQUIRE(r);
      int* d = r->item().data.ensure(words, prod);
      prod.enqueue([d, k] { d[0] = 10 + k; });
      REQUIRE(ch->publish(std::move(*r), prod));
    }
    ch->close();
    auto first = lease::pop(ch, at);
    auto second = lease::pop(ch, at);
    REQUIRE(first);
    REQUIRE(second);
    CHECK_FALSE(lease::pop(ch, at));  // closed and drained
    t = dl::export_lease(*first, first->item().data.data(), dl::row_major<int>({1}), cons_st);
    // `second` is never exported: dropping it returns its slot.
    // The "pipeline" lets go of the channel: only the tensor holds it now.
    std::weak_ptr<channel> w = ch;
    ch.reset();
    first.reset();
    second.reset();
    CHECK_FALSE(w.expired());
    backend.enqueue(cons_st, [d = static_cast<int*>(t->dl_tensor.data), &seen] { seen = d[0]; });
    t->deleter(t);  // the last holder: the slot goes back and the channel goes
    CHECK(w.expired());
  }
  backend.synchronize(cons_st);
  CHECK(seen.load() == 10);  // read before the channel freed the slot
  for (auto s : {lease_st, cons_st, prod_st}) backend.destroy_stream(s);
}
