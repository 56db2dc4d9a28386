#pragma once
// Shared plumbing of the ops' CUDA paths: error checks that throw, and the
// carving of one caller-owned temp allocation into aligned pieces (so every
// op does CUB's two-phase size query once and allocates nothing itself).

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/ops/validate.hpp"

namespace dflash::ops::gpu::detail {

/// dflash::detail::cuda_check / cuda_check_launch, messages prefixed "dflash::ops::gpu: ".
inline void check(cudaError_t e, std::string_view what) {
  if (e != cudaSuccess) dflash::detail::cuda_check(e, "dflash::ops::gpu: " + std::string(what));
}
inline void check_launch(std::string_view what) {  // the message is built only on failure
  check(dflash::detail::launch_error(), what);
}

inline constexpr std::size_t temp_alignment = 256;  // what cudaMalloc guarantees; CUB expects it

[[nodiscard]] constexpr std::size_t align_up(std::size_t n) noexcept {
  return (n + temp_alignment - 1) / temp_alignment * temp_alignment;
}

/// Hands out aligned sub-buffers of one temp allocation, in a fixed order.
/// With base == nullptr it only adds up the sizes (the size-query pass).
class temp_carver {
 public:
  explicit temp_carver(void* base) noexcept : base_(static_cast<std::byte*>(base)) {}
  template <class T>
  T* take(std::size_t n) noexcept {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += align_up(n * sizeof(T));
    return p;
  }
  void* take_bytes(std::size_t n) noexcept { return take<std::byte>(n); }
  [[nodiscard]] std::size_t used() const noexcept { return used_; }

 private:
  std::byte* base_;
  std::size_t used_ = 0;
};

inline void check_temp(const void* temp, std::size_t have, std::size_t need, std::string_view op) {
  ops::detail::require(temp != nullptr || need == 0, op, "temp storage is null");
  ops::detail::require(reinterpret_cast<std::uintptr_t>(temp) % temp_alignment == 0, op,
                       "temp storage must be 256-byte aligned");
  ops::detail::require(have >= need, op,
                       "temp storage has " + std::to_string(have) + " bytes, needs " + std::to_string(need));
}

[[nodiscard]] inline unsigned grid_for(std::int64_t items, unsigned threads, unsigned cap = 1u << 16) noexcept {
  const std::int64_t g = (items + threads - 1) / threads;
  return g < 1 ? 1u : g > cap ? cap : static_cast<unsigned>(g);
}

}  // namespace dflash::ops::gpu::detail
