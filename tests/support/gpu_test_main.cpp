// Main for GPU tests. Before Catch runs, the device check of gpu_probe.hpp:
// no device -> "skipped: no CUDA device", exit 77 (ctest SKIP_RETURN_CODE),
// or, with DFLASH_REQUIRE_GPU=1 (strict, as run.sh of scripts/gpu-bundle.sh
// runs it), "FAIL: no CUDA device", exit 1; a present but unusable driver
// fails either way. The rule and its reasons are documented in gpu_probe.hpp.
// A test built with DFLASH_TEST_MIN_DEVICES=N (dflash_add_gpu_test MIN_DEVICES N)
// needs N devices: with fewer (but at least one) it prints "skipped: needs N
// CUDA devices" and exits 77 even in strict mode — the machine has a GPU, it
// just cannot host what the test places; run.sh reports that as SKIP.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "gpu_probe.hpp"

#include <cstdio>

int main(int argc, char** argv) {
  const char* who = argc > 0 ? argv[0] : "gpu test";
  if (const auto code = dflash_test::check_gpu(who)) return *code;
#ifdef DFLASH_TEST_MIN_DEVICES
  int n = 0;
  if (cudaGetDeviceCount(&n) == cudaSuccess && n < DFLASH_TEST_MIN_DEVICES) {
    std::printf("%s: skipped: needs %d CUDA devices, %d visible (placement over devices has nothing to place)\n", who,
                DFLASH_TEST_MIN_DEVICES, n);
    std::fflush(stdout);
    return dflash_test::exit_skipped;
  }
#endif
  return Catch::Session().run(argc, argv);
}
