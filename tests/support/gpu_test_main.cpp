// Main for GPU tests. Before Catch runs, the device check of gpu_probe.hpp:
// no device -> "skipped: no CUDA device", exit 77 (ctest SKIP_RETURN_CODE),
// or, with DFLASH_REQUIRE_GPU=1 (strict, as run.sh of scripts/gpu-bundle.sh
// runs it), "FAIL: no CUDA device", exit 1; a present but unusable driver
// fails either way. The rule and its reasons are documented in gpu_probe.hpp.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "gpu_probe.hpp"

int main(int argc, char** argv) {
  if (const auto code = dflash_test::check_gpu(argc > 0 ? argv[0] : "gpu test")) return *code;
  return Catch::Session().run(argc, argv);
}
