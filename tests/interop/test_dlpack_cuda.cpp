// The DLPack export over cuda_backend: built here (host TU with cudart; no device needed), and
// the device type a CUDA slot reports checked. Running an export on a GPU is the bundle's part.
#include <catch2/catch.hpp>

#include <dflash/device/cuda_backend.hpp>
#include <dflash/device/device_channel.hpp>
#include <dflash/interop/dlpack.hpp>

namespace {
struct cuda_slot : dflash::device_item<dflash::cuda_backend> {
  dflash::device_buffer<float, dflash::cuda_backend> hs;
};
using channel = dflash::device_channel<cuda_slot>;
using lease = dflash::device_lease<channel>;

// Instantiated, never called: the CUDA path of every export compiles.
[[maybe_unused]] DLManagedTensorVersioned* export_one(const lease& l, cudaStream_t c) {
  return dflash::dlpack::export_lease(l, l.item().hs.data(), dflash::dlpack::row_major<float>({2, 3}), c);
}
[[maybe_unused]] DLManagedTensor* export_one_unversioned(const lease& l, cudaStream_t c) {
  return dflash::dlpack::export_lease_unversioned(l, l.item().hs.data(), dflash::dlpack::row_major<float>({6}), c);
}
}  // namespace

TEST_CASE("a CUDA slot is exported as kDLCUDA memory of its stream's device", "[dlpack]") {
  const DLDevice d = dflash::dlpack::memory_of<dflash::cuda_backend>::device(3);
  CHECK(d.device_type == kDLCUDA);
  CHECK(d.device_id == 3);
  CHECK(&export_one != nullptr);
  CHECK(&export_one_unversioned != nullptr);
}
