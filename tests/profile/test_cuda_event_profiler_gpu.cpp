// CudaEventProfiler on a real device (ctest reports "skipped" without one).
// The kernel (test_cuda_event_profiler.cu) spins on %globaltimer, so a
// range's GPU time has a known lower bound.
#include <catch2/catch.hpp>
#include <dflash/profile/cuda_event_profiler.hpp>

#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdint>
#include <stdexcept>

cudaError_t dflash_test_spin(cudaStream_t s, std::uint64_t ns);

using namespace dflash::literals;
using namespace std::chrono_literals;

using keys = dflash::key_set<"forward", "pack">;
using gpu_t = dflash::CudaEventProfiler<keys>;

namespace {
void check(cudaError_t e) { REQUIRE(e == cudaSuccess); }

void spin(cudaStream_t s, std::uint64_t ns) { REQUIRE(dflash_test_spin(s, ns) == cudaSuccess); }

struct stream_guard {
  cudaStream_t s{};
  stream_guard() { check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~stream_guard() { cudaStreamDestroy(s); }
};
}  // namespace

TEST_CASE("GPU time of the work between begin and end, exact count", "[cuda_event][gpu]") {
  stream_guard st;
  gpu_t p(st.s, 16);
  for (int i = 0; i < 10; ++i) {
    auto t = p.scope("forward"_key);
    spin(st.s, 200'000);
  }
  check(cudaStreamSynchronize(st.s));
  const auto s = p.snapshot();
  const auto& f = *s.find("forward");
  CHECK(f.count == 10);
  CHECK(f.min_ns >= 190'000);  // the kernel spun >= 200 us of GPU time; events resolve ~0.5 us
  CHECK(s.find("pack")->count == 0);
  CHECK(p.pending_count() == 0);
  CHECK(p.dropped() == 0);
}

TEST_CASE("end() does not wait for the GPU; synchronize() resolves", "[cuda_event][gpu]") {
  stream_guard st;
  gpu_t p(st.s, 4);
  auto tok = p.begin("pack"_key);
  spin(st.s, 300'000'000);  // 300 ms
  p.end("pack"_key, tok);
  CHECK(p.pending_count() == 1);  // still running: nothing blocked
  CHECK(p.poll() == 0);
  // The busy query's cudaErrorNotReady is an answer, not an error: nothing is
  // left for the caller's next launch check.
  CHECK(cudaPeekAtLastError() == cudaSuccess);
  CHECK(p.count("pack"_key) == 0);
  p.synchronize();
  CHECK(p.pending_count() == 0);
  CHECK(p.count("pack"_key) == 1);
  CHECK(p.snapshot().find("pack")->min_ns >= 299'000'000);
}

TEST_CASE("a small pool is reused; a pool with every pair in flight drops and counts", "[cuda_event][gpu]") {
  stream_guard st;
  gpu_t p(st.s, 2);
  for (int i = 0; i < 50; ++i) {
    auto t = p.scope("forward"_key);
    spin(st.s, 1'000);
    check(cudaStreamSynchronize(st.s));  // done before the next begin: its pair is reclaimable
  }
  CHECK(p.dropped() == 0);
  CHECK(p.snapshot().find("forward")->count == 50);

  auto a = p.begin("pack"_key);
  auto b = p.begin("pack"_key);
  auto c = p.begin("pack"_key);  // both pairs open: dropped
  CHECK(p.dropped() == 1);
  p.end("pack"_key, c);  // a dropped token is ignored
  p.end("pack"_key, b);
  p.end("pack"_key, a);
  p.synchronize();
  CHECK(p.count("pack"_key) == 2);
}

TEST_CASE("per-call streams and set_stream", "[cuda_event][gpu]") {
  stream_guard s1, s2;
  gpu_t p(s1.s, 8);
  CHECK(p.stream() == s1.s);
  {
    auto t = p.scope("pack"_key, s2.s);
    spin(s2.s, 100'000);
  }
  p.set_stream(s2.s);
  CHECK(p.stream() == s2.s);
  {
    auto t = p.scope("forward"_key);
    spin(s2.s, 100'000);
  }
  p.synchronize();
  const auto s = p.snapshot();
  CHECK(s.find("pack")->count == 1);
  CHECK(s.find("pack")->min_ns >= 95'000);
  CHECK(s.find("forward")->count == 1);
  CHECK(s.find("forward")->min_ns >= 95'000);
  p.add("forward"_key, 1ms);
  CHECK(p.count("forward"_key) == 2);
  CHECK_THROWS_AS(p.add("forward"_key, -1ms), std::invalid_argument);
}
