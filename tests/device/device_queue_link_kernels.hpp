#pragma once
// The kernels of test_device_queue_link_gpu (defined in its .cu): a pipeline TU
// is host C++, so it launches them through these functions.
#include <dflash/device/device_rows.hpp>
#include <dflash/device/cuda_backend.hpp>

#include <cuda_runtime.h>

namespace rows_gpu_test {
struct row {
  int item, j;
};
constexpr int bound = 64, items = 400;  // rows per call: one per producer thread, at most
__host__ __device__ inline int rows_of(int x) { return x % 7 == 0 ? 0 : x % 5 == 0 ? bound : (x * 13) % (bound + 1); }
void launch_produce(dflash::row_pusher<row> p, int x, long long spin, cudaStream_t s);
void launch_consume(dflash::row_batch<row> b, int* tally, int* bad, cudaStream_t s);
}  // namespace rows_gpu_test
