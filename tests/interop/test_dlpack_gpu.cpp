// DLPack export of a CUDA slot, consumed the way a framework consumes it (a copy on the
// consumer's own stream through the tensor's pointer, as torch.from_dlpack(t) followed by work on
// torch's current stream would): the consumer stream waits for the producer's fill without a host
// wait, and the slot's next producer waits for the consumer's read. Both orders are made
// observable by host functions that hold a stream back: a consumer that did not wait would read
// the poison, a producer that did not wait would overwrite the values before they are read.
// Without a device the shared main reports "skipped" (exit 77).
#include <catch2/catch.hpp>
#include <dflash/device/cuda_backend.hpp>
#include <dflash/device/device_channel.hpp>
#include <dflash/interop/dlpack.hpp>

#include <cuda_runtime.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "watchdog.hpp"

using B = dflash::cuda_backend;
using DS = dflash::device_stream<B>;

namespace {
struct slot : dflash::device_item<B> {
  dflash::device_buffer<float, B> hs;
};
using channel = dflash::device_channel<slot>;
using lease = dflash::device_lease<channel>;

void CUDART_CB hold_back(void*) { std::this_thread::sleep_for(std::chrono::milliseconds(100)); }

void ok(cudaError_t e) { REQUIRE(e == cudaSuccess); }
}  // namespace

TEST_CASE("DLPack over a CUDA slot: the consumer stream waits for the fill, the slot's next fill for the read",
          "[dlpack][gpu]") {
  watchdog wd("dlpack gpu");
  constexpr int rows = 64, cols = 48;
  constexpr std::size_t n = std::size_t{rows} * cols, bytes = n * sizeof(float);
  B backend;
  auto ps = backend.create_stream(), ls = backend.create_stream(), cs = backend.create_stream();
  std::vector<float> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = 0.5f * static_cast<float>(i) - 7.0f;
  float* seen = nullptr;  // pinned: the consumer's asynchronous copy lands here
  ok(cudaMallocHost(&seen, bytes));
  {
    auto ch = std::make_shared<channel>(backend, 1);  // one slot: the next acquire is this slot again
    const DS prod(backend, ps), at(backend, ls);
    auto r = ch->acquire(prod);
    REQUIRE(r);
    float* d = r->item().hs.ensure(n, prod);
    ok(cudaMemsetAsync(d, 0xFF, bytes, ps));  // poison (NaN), then the fill, held back 100 ms
    ok(cudaStreamSynchronize(ps));
    ok(cudaLaunchHostFunc(ps, hold_back, nullptr));
    ok(cudaMemcpyAsync(d, values.data(), bytes, cudaMemcpyHostToDevice, ps));
    REQUIRE(ch->publish(std::move(*r), prod));

    auto l = lease::pop(ch, at);
    REQUIRE(l);
    DLManagedTensorVersioned* t =
        dflash::dlpack::export_lease(*l, l->item().hs.data(), dflash::dlpack::row_major<float>({rows, cols}), cs);
    l.reset();  // the tensor holds the slot now
    REQUIRE(t != nullptr);
    CHECK(t->dl_tensor.data == d);  // zero-copy: the slot's own memory
    CHECK(t->dl_tensor.device.device_type == kDLCUDA);
    int dev = -1;
    ok(cudaGetDevice(&dev));
    CHECK(t->dl_tensor.device.device_id == dev);

    // The consumer: held back too, then reads through the tensor on its own stream.
    ok(cudaLaunchHostFunc(cs, hold_back, nullptr));
    ok(cudaMemcpyAsync(seen, t->dl_tensor.data, bytes, cudaMemcpyDeviceToHost, cs));
    t->deleter(t);  // dropped at once: the slot goes back after cs's work so far

    auto again = ch->acquire(prod);  // the same slot, for the next producer
    REQUIRE(again);
    ok(cudaMemsetAsync(again->item().hs.data(), 0, bytes, ps));  // must run after the consumer's read
    ok(cudaStreamSynchronize(cs));
    CHECK(std::memcmp(seen, values.data(), bytes) == 0);
    ch->abandon(std::move(*again), prod);
    for (auto s : {ps, ls, cs}) ok(cudaStreamSynchronize(s));
  }
  ok(cudaFreeHost(seen));
  for (auto s : {ps, ls, cs}) backend.destroy_stream(s);
}
