// CudaEventProfiler from a g++ TU linking cudart: the policy's shape, and the
// paths that need no GPU (bad input; no device → a clear error). GPU timing
// itself is tested in test_cuda_event_profiler.cu (skipped without a device).
#include <catch2/catch.hpp>
#include <dflash/profile/composite.hpp>
#include <dflash/profile/cuda_event_profiler.hpp>

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <type_traits>

using namespace dflash::literals;

using keys = dflash::key_set<"forward", "pack">;
using gpu_t = dflash::CudaEventProfiler<keys>;

static_assert(dflash::ProfilerPolicy<gpu_t>);
static_assert(gpu_t::enabled);
static_assert(!std::is_empty_v<gpu_t>);
static_assert(std::is_same_v<decltype(std::declval<const gpu_t&>().begin("pack"_key, cudaStream_t{})), gpu_t::token>);
static_assert(noexcept(std::declval<const gpu_t&>().begin("pack"_key)));
static_assert(noexcept(std::declval<const gpu_t&>().end("pack"_key, gpu_t::token{})));
static_assert(dflash::ProfilerPolicy<dflash::Composite<gpu_t, dflash::AccumulatingProfiler<keys>>>);

namespace {
bool have_device() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}
}  // namespace

TEST_CASE("a zero-sized event pool is rejected before any CUDA call", "[cuda_event]") {
  CHECK_THROWS_AS(gpu_t(nullptr, 0), std::invalid_argument);
  CHECK_THROWS_WITH(gpu_t(nullptr, 0), Catch::Contains("pool_size must be in [1, 2^32 - 1), got 0"));
}

TEST_CASE("without a usable device, construction fails with the CUDA error, not later", "[cuda_event]") {
  if (have_device()) {
    const gpu_t p(nullptr, 4);
    CHECK(p.pool_size() == 4);
    CHECK(p.pending_count() == 0);
    CHECK(p.snapshot().keys.size() == 2);
  } else {
    try {
      const gpu_t p(nullptr, 4);
      FAIL("constructed CUDA events with no device");
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      CHECK(what.find("dflash::CudaEventProfiler: cannot create CUDA events (cuda") != std::string::npos);
    }
  }
}
