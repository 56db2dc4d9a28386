#pragma once
// dflash::bf16: a 2-byte bfloat16 storage type for host code, bit-compatible
// with CUDA's __nv_bfloat16 (same size, alignment and bit layout), so buffers
// are shared between host twins and kernels by reinterpretation.
// float -> bf16 rounds to nearest even; NaN becomes the canonical quiet NaN
// 0x7FFF (what cvt.rn.bf16.f32 produces); bf16 -> float is exact.

#include "dflash/detail/require_cccl.hpp"  // first: a clear error without CCCL

#include <cstdint>
#include <cuda/std/bit>

#include "dflash/config.hpp"

namespace dflash {

struct bf16 {
  std::uint16_t bits;

  bf16() = default;
  DFLASH_HOST_DEVICE constexpr explicit bf16(float f) noexcept : bits(round_bits(f)) {}

  [[nodiscard]] DFLASH_HOST_DEVICE static constexpr bf16 from_bits(std::uint16_t b) noexcept {
    bf16 r{};
    r.bits = b;
    return r;
  }
  [[nodiscard]] DFLASH_HOST_DEVICE constexpr float to_float() const noexcept {
    return ::cuda::std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
  }
  DFLASH_HOST_DEVICE constexpr explicit operator float() const noexcept { return to_float(); }

  /// Bitwise equality (so +0 != -0 and NaN == NaN with the same bits).
  DFLASH_HOST_DEVICE friend constexpr bool operator==(bf16 a, bf16 b) noexcept { return a.bits == b.bits; }

  [[nodiscard]] DFLASH_HOST_DEVICE static constexpr std::uint16_t round_bits(float f) noexcept {
    const std::uint32_t u = ::cuda::std::bit_cast<std::uint32_t>(f);
    if ((u & 0x7FFF'FFFFu) > 0x7F80'0000u) return 0x7FFF;  // NaN
    const std::uint32_t lsb = (u >> 16) & 1u;
    return static_cast<std::uint16_t>((u + 0x7FFFu + lsb) >> 16);
  }
};

static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2, "bf16 must match __nv_bfloat16's layout");

}  // namespace dflash
