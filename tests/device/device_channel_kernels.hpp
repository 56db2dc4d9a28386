#pragma once
// Launchers for the kernels of test_device_channel_gpu (defined in the .cu).
#include <cuda_runtime.h>

namespace gpu_test {
inline constexpr int words = 1024;
/// d[i] = pattern(x, i) for i < words, after spinning `spin_cycles` (0: none).
void launch_fill(int* d, int x, long long spin_cycles, cudaStream_t s);
/// *ok_out = 1 if d holds pattern(x, .), else 0.
void launch_check(const int* d, int x, int* ok_out, cudaStream_t s);
}  // namespace gpu_test
