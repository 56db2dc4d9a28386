#pragma once
// The one rule every GPU test main and GPU benchmark main applies before it
// touches the GPU (tests/support/gpu_test_main.cpp, benchmarks/ops/ops_gpu.cu,
// tests/support/gpu_probe_main.cu):
//
//   cudaGetDeviceCount(&n)                             state
//   ------------------------------------------------   ----------
//   cudaSuccess, n > 0                                 usable
//   cudaSuccess, n == 0                                no_device
//   cudaErrorNoDevice                                  no_device
//   cudaErrorInsufficientDriver and no driver at all   no_device
//     (cudaDriverGetVersion reports 0: libcuda.so.1 is not installed, as on
//      the build/CI machines)
//   anything else                                      broken
//     (a driver that is present but too old for this runtime, a failed
//      initialisation, ...: the machine claims a GPU and cannot use it)
//
// What each state does:
//   usable     run.
//   no_device  without strict mode: print "skipped: no CUDA device (...)" and
//              exit 77 (ctest SKIP_RETURN_CODE) — never reported as passed.
//              strict mode (DFLASH_REQUIRE_GPU set and not "0", which
//              scripts/gpu-bundle.sh's run.sh sets): "FAIL: no CUDA device
//              (...)" and exit 1.
//   broken     "FAIL: CUDA initialisation failed (...)" and exit 1, strict or not.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace dflash_test {

enum class gpu_state { usable, no_device, broken };

inline constexpr int exit_skipped = 77;  ///< no device, not strict: ctest reports "skipped"
inline constexpr int exit_no_gpu = 1;    ///< strict without a device, or a broken CUDA setup

/// The rule above, pure (unit-tested in tests/gpu_bundle/test_gpu_probe.cpp).
constexpr gpu_state classify(cudaError_t count_error, int count, int driver_version) noexcept {
  if (count_error == cudaSuccess) return count > 0 ? gpu_state::usable : gpu_state::no_device;
  if (count_error == cudaErrorNoDevice) return gpu_state::no_device;
  if (count_error == cudaErrorInsufficientDriver && driver_version == 0) return gpu_state::no_device;
  return gpu_state::broken;
}

/// Strict mode: DFLASH_REQUIRE_GPU is set to anything but "" or "0".
inline bool gpu_required(const char* value = std::getenv("DFLASH_REQUIRE_GPU")) noexcept {
  return value != nullptr && *value != '\0' && std::strcmp(value, "0") != 0;
}

/// What a main does for a state: nothing (go on) or the exit code to stop with.
constexpr std::optional<int> exit_code_for(gpu_state s, bool strict) noexcept {
  switch (s) {
    case gpu_state::usable: return std::nullopt;
    case gpu_state::no_device: return strict ? exit_no_gpu : exit_skipped;
    case gpu_state::broken: return exit_no_gpu;
  }
  return exit_no_gpu;
}

/// Probes the runtime, prints the verdict when not usable (to stdout, which
/// ctest and run.sh log), and returns the exit code to stop with, if any.
inline std::optional<int> check_gpu(const char* who) {
  int n = 0, driver = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  const gpu_state s = classify(err, n, driver);
  const bool strict = gpu_required();
  const auto code = exit_code_for(s, strict);
  if (!code) return code;
  char why[256];
  if (err != cudaSuccess)
    std::snprintf(why, sizeof why, "%s, driver version %d", cudaGetErrorName(err), driver);
  else
    std::snprintf(why, sizeof why, "0 devices, driver version %d", driver);
  if (s == gpu_state::broken)
    std::printf("%s: FAIL: CUDA initialisation failed (%s): a driver is present but unusable\n", who, why);
  else if (strict)
    std::printf("%s: FAIL: no CUDA device (%s) and DFLASH_REQUIRE_GPU is set: nothing was tested\n", who, why);
  else
    std::printf("%s: skipped: no CUDA device (%s)\n", who, why);
  std::fflush(stdout);
  return code;
}

}  // namespace dflash_test
