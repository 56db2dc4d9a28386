// CudaEventProfiler's pool size is checked before any CUDA call, so this host
// TU (linking cudart) runs without a device: pool 0 and a pool too large for
// its 32-bit slot ids are std::invalid_argument naming the value.
#include <catch2/catch.hpp>
#include <dflash/profile/cuda_event_profiler.hpp>

#include <cstddef>
#include <stdexcept>

TEST_CASE("CudaEventProfiler: pool_size 0 or >= 2^32 - 1 is rejected before any CUDA call", "[bad_input][profile]") {
  using gpu_t = dflash::CudaEventProfiler<dflash::key_set<"x">>;
  CHECK_THROWS_MATCHES(gpu_t(nullptr, 0), std::invalid_argument,
                       Catch::Matchers::Message("dflash::CudaEventProfiler: pool_size must be in [1, 2^32 - 1), got 0"));
  const std::size_t too_many = (std::size_t{1} << 32) - 1;
  CHECK_THROWS_MATCHES(gpu_t(nullptr, too_many), std::invalid_argument,
                       Catch::Matchers::Message(
                           "dflash::CudaEventProfiler: pool_size must be in [1, 2^32 - 1), got 4294967295"));
}
