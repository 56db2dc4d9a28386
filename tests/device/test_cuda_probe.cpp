// cuda_backend::probe()'s reasons, in a user's terms (a host TU with cudart;
// no device needed): no driver is "driver missing or too old", not only CUDA's
// "driver version is insufficient".
#include <catch2/catch.hpp>

#include <dflash/device/cuda_backend.hpp>
#include <dflash/device/cuda_check.hpp>

using Catch::Matchers::Contains;
using Catch::Matchers::StartsWith;

TEST_CASE("no usable CUDA device: the reason says what to look at", "[device]") {
  CHECK_THAT(dflash::no_cuda_device_reason(cudaErrorInsufficientDriver),
             StartsWith("no usable CUDA device (driver missing or too old: "));
  CHECK(dflash::no_cuda_device_reason(cudaErrorNoDevice) == "no CUDA device found");
  CHECK_THAT(dflash::no_cuda_device_reason(cudaErrorInitializationError),
             StartsWith("no usable CUDA device (cudaGetDeviceCount: "));
  // This machine's answer: a usable device, or one of the reasons above.
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaErrorInsufficientDriver)
    CHECK_THAT(dflash::cuda_backend::probe(), Contains("driver missing or too old"));
}
