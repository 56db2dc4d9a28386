#pragma once
// Launchers for the kernels of test_device_channel_gpu (defined in the .cu).
#include <cuda_runtime.h>

namespace gpu_test {
inline constexpr int words = 1024;
/// d[i] = pattern(x, i) for i < words, after spinning `spin_cycles` (0: none).
void launch_fill(int* d, int x, long long spin_cycles, cudaStream_t s);
/// *ok_out = 1 if d holds pattern(x, .), else 0.
void launch_check(const int* d, int x, int* ok_out, cudaStream_t s);

/// A dflash::device_queue<int> (CUB-aggregated ring) behind an opaque handle,
/// so host code that holds one needs no CUDA compiler.
struct ring;
ring* make_ring(int capacity, cudaStream_t s);  // set-up: waits once for the ring's init kernel
void destroy_ring(ring* r);
/// One warp: lane l pushes (x + l) % 3 rows valued x * 1000 + l * 10 + j with warp_try_push;
/// *status_out = the ring_status (0 = ok). The count is decided on the device.
void launch_ring_fill(ring* r, int x, int* status_out, cudaStream_t s);
/// One warp pops with warp_try_pop until empty; out[0] = rows, out[1] = sum of values.
void launch_ring_drain(ring* r, long long* out, cudaStream_t s);
}  // namespace gpu_test
