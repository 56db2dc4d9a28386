#pragma once
// Plain-value results of a profiler: what snapshot() returns and reports print.

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "dflash/profile/histogram.hpp"

namespace dflash {

struct key_stats {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  std::uint64_t min_ns = 0;  // 0 when count == 0
  std::uint64_t max_ns = 0;
  std::vector<std::uint64_t> buckets = std::vector<std::uint64_t>(histogram::bucket_count, 0);

  double mean_ns() const noexcept {
    return count ? static_cast<double>(total_ns) / static_cast<double>(count) : 0.0;
  }

  /// Quantile q in [0, 1] from the histogram: the midpoint of the bucket that
  /// holds the rank-ceil(q*count) value, clamped to the exact [min, max].
  std::uint64_t percentile_ns(double q) const noexcept {
    if (count == 0) return 0;
    q = std::clamp(q, 0.0, 1.0);
    auto rank = static_cast<std::uint64_t>(q * static_cast<double>(count) + 0.999999999);
    rank = std::clamp<std::uint64_t>(rank, 1, count);
    std::uint64_t seen = 0;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      seen += buckets[i];
      if (seen >= rank) {
        const std::uint64_t lo = histogram::bucket_lower(i);
        const std::uint64_t hi = histogram::bucket_upper(i);
        const std::uint64_t mid = hi == UINT64_MAX ? lo : lo + (hi - lo - 1) / 2;
        return std::clamp(mid, min_ns, max_ns);
      }
    }
    return max_ns;  // buckets were read while adds were in flight
  }
  std::uint64_t p50_ns() const noexcept { return percentile_ns(0.50); }
  std::uint64_t p90_ns() const noexcept { return percentile_ns(0.90); }
  std::uint64_t p99_ns() const noexcept { return percentile_ns(0.99); }

  /// Merge another record of the same key (shards, or several profilers).
  key_stats& operator+=(const key_stats& o) {
    if (o.count) {
      min_ns = count ? std::min(min_ns, o.min_ns) : o.min_ns;
      max_ns = std::max(max_ns, o.max_ns);
    }
    count += o.count;
    total_ns += o.total_ns;
    for (std::size_t i = 0; i < buckets.size() && i < o.buckets.size(); ++i) buckets[i] += o.buckets[i];
    return *this;
  }
};

/// Everything a profiler recorded over one window (since construction or the
/// last clear/take), keys in key_set order.
struct profile_snapshot {
  std::uint64_t window_ns = 0;
  std::vector<key_stats> keys;

  const key_stats* find(std::string_view name) const noexcept {
    for (const auto& k : keys)
      if (k.name == name) return &k;
    return nullptr;
  }
};

}  // namespace dflash
