#pragma once
// CUDA backend of batched_readback: staging slots in device memory, host
// buffers in pinned memory (cudaMallocHost, so the copy is truly async), one
// gather kernel for staged scalars, one cudaMemcpyAsync and one event
// (timing disabled: cheapest to record and query) per submit.
//
//   dflash::ops::gpu::cuda_batched_readback rb(3);
//   loss_kernel<<<g, b, 0, stream>>>(..., rb.slot<float>(0));
//   rb.stage(1, d_correct);                    // an int32 already on the device
//   auto h = rb.submit(stream);
//   ... h.get<float>(0), h.get<std::int32_t>(1)

#include <algorithm>

#include "dflash/ops/batched_readback.hpp"
#include "dflash/ops/cuda_support.cuh"

namespace dflash::ops::gpu {

namespace detail {
inline constexpr std::size_t gather_batch = 64;

struct gather_args {
  readback_source src[gather_batch];
  unsigned count;
};

template <class Args>
__global__ void gather_kernel(std::byte* staging, Args args) {
  const unsigned i = threadIdx.x;
  if (i >= args.count) return;
  const auto* from = static_cast<const unsigned char*>(args.src[i].src);
  auto* to = reinterpret_cast<unsigned char*>(staging) + static_cast<std::size_t>(args.src[i].slot) * 8u;
  for (std::uint32_t k = 0; k < args.src[i].bytes; ++k) to[k] = from[k];
}
}  // namespace detail

struct cuda_readback_backend {
  using stream_type = cudaStream_t;
  using event_type = cudaEvent_t;

  std::byte* allocate_device(std::size_t n) {
    void* p = nullptr;
    detail::check(cudaMalloc(&p, n), "readback: cudaMalloc");
    // cudaMemset is asynchronous and runs on the default stream, which a
    // cudaStreamNonBlocking stream does not wait for: finish it here, or the
    // zeroing could land after a producer's first write to a slot.
    cudaError_t e = cudaMemset(p, 0, n);
    if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
    if (e != cudaSuccess) cudaFree(p);
    detail::check(e, "readback: cudaMemset");
    return static_cast<std::byte*>(p);
  }
  void free_device(std::byte* p) noexcept { cudaFree(p); }
  std::byte* allocate_host(std::size_t n) {
    void* p = nullptr;
    detail::check(cudaMallocHost(&p, n), "readback: cudaMallocHost");
    return static_cast<std::byte*>(p);
  }
  void free_host(std::byte* p) noexcept { cudaFreeHost(p); }
  event_type create_event() {
    cudaEvent_t e = nullptr;
    detail::check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "readback: cudaEventCreate");
    return e;
  }
  void destroy_event(event_type e) noexcept { cudaEventDestroy(e); }
  void gather(std::byte* staging, const readback_source* src, std::size_t n, stream_type s) {
    for (std::size_t first = 0; first < n; first += detail::gather_batch) {
      detail::gather_args args{};
      args.count = static_cast<unsigned>(std::min(detail::gather_batch, n - first));
      std::copy_n(src + first, args.count, args.src);
      detail::gather_kernel<<<1, detail::gather_batch, 0, s>>>(staging, args);
      detail::check_launch("readback: gather launch");
    }
  }
  void copy_to_host(std::byte* dst, const std::byte* src, std::size_t n, stream_type s) {
    detail::check(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s), "readback: cudaMemcpyAsync");
  }
  void record(event_type e, stream_type s) { detail::check(cudaEventRecord(e, s), "readback: cudaEventRecord"); }
  bool query(event_type e) {  // "not ready" is an answer: cuda_ready leaves no stale error behind
    return dflash::detail::cuda_ready(cudaEventQuery(e), "dflash::ops::gpu: readback: cudaEventQuery");
  }
  void synchronize(event_type e) { detail::check(cudaEventSynchronize(e), "readback: cudaEventSynchronize"); }
};
static_assert(ReadbackBackend<cuda_readback_backend>);

using cuda_batched_readback = batched_readback<cuda_readback_backend>;

}  // namespace dflash::ops::gpu
