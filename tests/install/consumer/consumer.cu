// A consumer's CUDA TU with the umbrella header: nvcc must compile all of
// dflash's host headers as C++20 with no help from the consumer
// (dflash::dflash carries the flag, and CCCL).
#include <dflash/dflash.hpp>

#include "version_check.hpp"

using namespace dflash::literals;

__global__ void fill(int* x) { x[threadIdx.x] = static_cast<int>(threadIdx.x); }

int main() {
  dflash::AccumulatingProfiler<dflash::key_set<"launch">> prof;
  { auto t = prof.scope("launch"_key); }  // host side only: no device here
  return prof.count("launch"_key) == 1 ? 0 : 1;
}
