// The device rule of support/gpu_probe.hpp, branch by branch: which CUDA
// initialisation results mean "no device" (skip, or fail in strict mode) and
// which mean "broken" (always fail). A broken driver cannot be staged on the
// build machines, so this is where that branch is proved.
#include <catch2/catch.hpp>

#include "gpu_probe.hpp"

using dflash_test::classify;
using dflash_test::exit_code_for;
using dflash_test::gpu_state;

TEST_CASE("a device that answers is usable; zero devices is no device", "[gpu-bundle]") {
  CHECK(classify(cudaSuccess, 1, 13000) == gpu_state::usable);
  CHECK(classify(cudaSuccess, 8, 13000) == gpu_state::usable);
  CHECK(classify(cudaSuccess, 0, 13000) == gpu_state::no_device);
}

TEST_CASE("cudaErrorNoDevice is no device", "[gpu-bundle]") {
  CHECK(classify(cudaErrorNoDevice, 0, 13000) == gpu_state::no_device);
  CHECK(classify(cudaErrorNoDevice, 0, 0) == gpu_state::no_device);
}

TEST_CASE("insufficient driver: no device only when no driver is installed at all", "[gpu-bundle]") {
  // No libcuda.so.1 (the build machines): cudaDriverGetVersion reports 0.
  CHECK(classify(cudaErrorInsufficientDriver, 0, 0) == gpu_state::no_device);
  // A driver that is there but older than the runtime: broken, never a skip.
  CHECK(classify(cudaErrorInsufficientDriver, 0, 12020) == gpu_state::broken);
}

TEST_CASE("any other initialisation error is broken", "[gpu-bundle]") {
  for (const cudaError_t e : {cudaErrorInitializationError, cudaErrorNotPermitted, cudaErrorSystemNotReady,
                              cudaErrorSystemDriverMismatch, cudaErrorCompatNotSupportedOnDevice,
                              cudaErrorDevicesUnavailable, cudaErrorUnknown}) {
    CAPTURE(static_cast<int>(e));
    CHECK(classify(e, 0, 13000) == gpu_state::broken);
    CHECK(classify(e, 0, 0) == gpu_state::broken);
  }
}

TEST_CASE("exit codes: skip only without strict mode, and only for no device", "[gpu-bundle]") {
  CHECK_FALSE(exit_code_for(gpu_state::usable, false).has_value());
  CHECK_FALSE(exit_code_for(gpu_state::usable, true).has_value());
  CHECK(exit_code_for(gpu_state::no_device, false) == 77);
  CHECK(exit_code_for(gpu_state::no_device, true) == 1);
  CHECK(exit_code_for(gpu_state::broken, false) == 1);
  CHECK(exit_code_for(gpu_state::broken, true) == 1);
}

TEST_CASE("strict mode: DFLASH_REQUIRE_GPU set to anything but empty or 0", "[gpu-bundle]") {
  CHECK_FALSE(dflash_test::gpu_required(nullptr));
  CHECK_FALSE(dflash_test::gpu_required(""));
  CHECK_FALSE(dflash_test::gpu_required("0"));
  CHECK(dflash_test::gpu_required("1"));
  CHECK(dflash_test::gpu_required("yes"));
}
