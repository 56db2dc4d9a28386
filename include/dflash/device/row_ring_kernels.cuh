#pragma once
// The CUDA side of dflash::device_queue_link: the row ring's four operations
// (row_ring_ops.hpp) as kernels. CUDA only. (Kernels that push rows use
// device/device_rows.cuh.)
//
// The four launchers are ordinary (not inline) functions, so that a host TU
// can build a pipeline with a device_queue_link on cuda_backend: include this
// file in exactly ONE .cu file of the program (a second one would define them
// twice; a missing one is a link error naming dflash::row_ring_kernels).
// Each checks for an error left pending by earlier work before it launches,
// so that a launch error is its own, not a stage kernel's.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/device/row_ring_ops.hpp"
#include "dflash/queue/device_queue.cuh"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

namespace detail {
template <class = void>
__global__ void row_ring_pop_kernel(ring_control ctl, std::uint32_t n, std::uint32_t at_least, ring_ticket* ticket) {
  *ticket = ctl.try_reserve_pop(n, at_least);
}
template <class = void>
__global__ void row_ring_release_kernel(ring_control ctl, const ring_ticket* ticket) {
  const ring_ticket t = *ticket;
  for (unsigned long long i = blockIdx.x * 1ull * blockDim.x + threadIdx.x; i < t.count; i += 1ull * gridDim.x * blockDim.x)
    ctl.release(t.first + i);
}
}  // namespace detail

void row_ring_kernels::init(ring_control ctl, void* stream) {
  detail::cuda_check_launch("dflash::device_queue_link: CUDA error pending before the ring's init");
  const auto s = static_cast<cudaStream_t>(stream);
  const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>((ctl.capacity() + 255) / 256, 1024));
  detail::ring_init_kernel<><<<blocks, 256, 0, s>>>(ctl);
  detail::cuda_check_launch("dflash::device_queue_link: ring init launch");
}
void row_ring_kernels::zero(unsigned long long* counter, void* stream) {
  detail::cuda_check_launch("dflash::device_queue_link: CUDA error pending before a producer call");
  detail::cuda_check(cudaMemsetAsync(counter, 0, sizeof *counter, static_cast<cudaStream_t>(stream)),
                     "dflash::device_queue_link: cudaMemsetAsync(pushed-row counter)");
}
void row_ring_kernels::pop(ring_control ctl, std::uint32_t n, std::uint32_t at_least, ring_ticket* ticket, void* stream) {
  detail::cuda_check_launch("dflash::device_queue_link: CUDA error pending before a pop");
  detail::row_ring_pop_kernel<><<<1, 1, 0, static_cast<cudaStream_t>(stream)>>>(ctl, n, at_least, ticket);
  detail::cuda_check_launch("dflash::device_queue_link: pop launch");
}
void row_ring_kernels::release(ring_control ctl, const ring_ticket* ticket, void* stream) {
  detail::cuda_check_launch("dflash::device_queue_link: CUDA error pending before a release (a consumer kernel's launch?)");
  detail::row_ring_release_kernel<><<<4, 256, 0, static_cast<cudaStream_t>(stream)>>>(ctl, ticket);
  detail::cuda_check_launch("dflash::device_queue_link: release launch");
}

}  // namespace dflash
