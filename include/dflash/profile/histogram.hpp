#pragma once
// Log-linear latency buckets (HDR-histogram style): 8 linear sub-buckets per
// power of two of nanoseconds, so any percentile read from the histogram is
// within 1/16 (6.25 %) of a recorded value. Pure constexpr arithmetic.

#include <bit>
#include <cstddef>
#include <cstdint>

namespace dflash::histogram {

inline constexpr unsigned sub_bits = 3;
inline constexpr std::uint64_t sub_count = 1u << sub_bits;  // 8
// Octaves above 2^43 ns (about 2.4 hours) share the last bucket.
inline constexpr unsigned max_exponent = 43;
inline constexpr std::size_t bucket_count = (max_exponent - sub_bits + 2) * sub_count;

constexpr std::size_t bucket_of(std::uint64_t ns) noexcept {
  if (ns < sub_count) return static_cast<std::size_t>(ns);
  unsigned e = static_cast<unsigned>(std::bit_width(ns)) - 1;  // >= sub_bits
  if (e > max_exponent) return bucket_count - 1;
  const std::uint64_t sub = (ns >> (e - sub_bits)) & (sub_count - 1);
  return (e - sub_bits + 1) * sub_count + static_cast<std::size_t>(sub);
}

/// Smallest value that falls in bucket i.
constexpr std::uint64_t bucket_lower(std::size_t i) noexcept {
  if (i < sub_count) return i;
  const unsigned e = static_cast<unsigned>(i / sub_count) + sub_bits - 1;
  const std::uint64_t sub = i % sub_count;
  return (sub_count + sub) << (e - sub_bits);
}

/// One past the largest value in bucket i (the last bucket is open-ended).
constexpr std::uint64_t bucket_upper(std::size_t i) noexcept {
  if (i + 1 >= bucket_count) return UINT64_MAX;
  return bucket_lower(i + 1);
}

static_assert(bucket_of(0) == 0 && bucket_of(7) == 7 && bucket_of(8) == 8);
static_assert(bucket_of(15) == 15 && bucket_of(16) == 16 && bucket_of(17) == 16);
static_assert(bucket_lower(bucket_of(1'000'000)) <= 1'000'000);
static_assert(bucket_upper(bucket_of(1'000'000)) > 1'000'000);
static_assert(bucket_of(UINT64_MAX) == bucket_count - 1);

}  // namespace dflash::histogram
