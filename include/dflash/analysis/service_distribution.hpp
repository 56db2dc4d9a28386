#pragma once
// service_distribution: per-item service times to drive the pipeline model,
// sampled from what a profiler recorded. From a key_stats it draws a bucket of
// the log-linear histogram in proportion to its count, then a value uniformly
// inside the bucket (clamped to the exact min/max), and scales every draw so
// that the mean equals the exact recorded mean (total / count): the shape comes
// from the histogram (within 6.25 %), the mean is exact. Deterministic and
// exponential forms serve tests with analytically known answers.
//
// The generator is splitmix64, written out here, so a seed gives the same
// samples on every standard library (std::*_distribution is implementation-defined).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "dflash/profile/histogram.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::analysis {

/// splitmix64: small, fast, good enough for sampling service times; seeded, deterministic.
class sim_rng {
 public:
  explicit sim_rng(std::uint64_t seed) noexcept : s_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (s_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

 private:
  std::uint64_t s_;
};

class service_distribution {
 public:
  service_distribution() = default;

  /// Every item takes exactly `ns`.
  static service_distribution deterministic(double ns) {
    service_distribution d;
    d.kind_ = kind::fixed;
    d.mean_ = ns;
    return d;
  }
  /// Exponential with this mean (memoryless: an M/M/c reference in tests).
  static service_distribution exponential(double mean_ns) {
    service_distribution d;
    d.kind_ = kind::expo;
    d.mean_ = mean_ns;
    return d;
  }
  /// The recorded distribution of one key (empty when the key has no record).
  static service_distribution from_stats(const key_stats& k) {
    service_distribution d;
    if (k.count == 0) return d;
    d.kind_ = kind::histogram;
    d.mean_ = k.mean_ns();
    double seen = 0, hist_mean = 0;
    for (std::size_t i = 0; i < k.buckets.size(); ++i) {
      if (k.buckets[i] == 0) continue;
      double lo = static_cast<double>(histogram::bucket_lower(i));
      double hi = i + 1 < histogram::bucket_count ? static_cast<double>(histogram::bucket_upper(i))
                                                   : static_cast<double>(k.max_ns) + 1;
      lo = std::clamp(lo, static_cast<double>(k.min_ns), static_cast<double>(k.max_ns));
      hi = std::clamp(hi, lo, static_cast<double>(k.max_ns) + 1);
      const double c = static_cast<double>(k.buckets[i]);
      seen += c;
      hist_mean += c * (lo + hi) / 2;
      d.cdf_.push_back(seen);
      d.lo_.push_back(lo);
      d.hi_.push_back(hi);
    }
    if (seen <= 0) {  // buckets empty but count set (a partial read): the mean alone
      d.kind_ = kind::fixed;
      return d;
    }
    for (double& c : d.cdf_) c /= seen;
    hist_mean /= seen;
    d.scale_ = hist_mean > 0 ? d.mean_ / hist_mean : 1.0;
    return d;
  }

  [[nodiscard]] bool empty() const noexcept { return kind_ == kind::none; }
  [[nodiscard]] double mean_ns() const noexcept { return mean_ * factor_; }
  /// Every draw multiplied by f (f = 0.5: the stage is twice as fast).
  [[nodiscard]] service_distribution scaled(double f) const {
    service_distribution d = *this;
    d.factor_ *= f;
    return d;
  }

  double sample(sim_rng& rng) const noexcept {
    switch (kind_) {
      case kind::none: return 0;
      case kind::fixed: return mean_ * factor_;
      case kind::expo: return -std::log1p(-rng.uniform()) * mean_ * factor_;
      case kind::histogram: {
        const double u = rng.uniform();
        const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
        const std::size_t i = std::min<std::size_t>(static_cast<std::size_t>(it - cdf_.begin()), cdf_.size() - 1);
        const double v = lo_[i] + (hi_[i] - lo_[i]) * rng.uniform();
        return v * scale_ * factor_;
      }
    }
    return 0;
  }

 private:
  enum class kind { none, fixed, expo, histogram };
  kind kind_ = kind::none;
  double mean_ = 0, factor_ = 1, scale_ = 1;
  std::vector<double> cdf_, lo_, hi_;
};

}  // namespace dflash::analysis
