#pragma once
// The statistics of dflash::bench (variants.hpp), on their own so they can be
// checked against known inputs:
//   spread_of(v)               median, p25, p75, min, max of a sample (linear
//                              interpolation between order statistics, as numpy's default)
//   ratios(a, b)               a[r] / b[r] per round r: what noise that spans a round cancels in
//   verdict_of(ratios)         "faster" / "slower" only when enough rounds agree (a sign
//                              test at the 10 % level: rounds_needed), else "within noise"
//   rotation(n, rounds, seed)  each round's order of n variants: a seeded shuffle, rotated by one each round

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dflash::bench {

/// Where a sample lies: its median, quartiles and extremes.
struct spread {
  double median = 0, p25 = 0, p75 = 0, min = 0, max = 0;
};

/// The q-quantile (0 <= q <= 1) of sorted values, interpolated linearly.
[[nodiscard]] inline double quantile_sorted(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) throw std::invalid_argument("dflash::bench::quantile: no values");
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("dflash::bench::quantile: q must be in [0, 1]");
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
}

[[nodiscard]] inline spread spread_of(std::vector<double> v) {
  if (v.empty()) throw std::invalid_argument("dflash::bench::spread_of: no values");
  for (const double x : v)
    if (!std::isfinite(x)) throw std::invalid_argument("dflash::bench::spread_of: a value is not finite");
  std::sort(v.begin(), v.end());
  return {quantile_sorted(v, 0.5), quantile_sorted(v, 0.25), quantile_sorted(v, 0.75), v.front(), v.back()};
}

/// a[r] / b[r] for every round r (both measured in that round).
[[nodiscard]] inline std::vector<double> ratios(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) throw std::invalid_argument("dflash::bench::ratios: the samples differ in rounds");
  std::vector<double> r(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!(b[i] > 0)) throw std::invalid_argument("dflash::bench::ratios: a baseline value is not positive");
    r[i] = a[i] / b[i];
  }
  return r;
}

/// How a variant compares with the baseline, from its per-round ratios of
/// rates (above 1: faster in that round).
enum class verdict { faster, slower, within_noise, baseline };

/// The fewest of n rounds that must fall on one side of 1 for a verdict: a
/// two-sided sign test at the 10 % level — a fair coin would put that many
/// rounds on one side less than one time in ten; n + 1 (never) below 5
/// rounds. (5 rounds: all 5; 7: all 7; 9: 8; 12: 10.)
[[nodiscard]] inline std::size_t rounds_needed(std::size_t n) noexcept {
  if (n < 4) return n + 1;
  // P(at least k on one side) = 2 * sum_{j >= k} C(n, j) / 2^n, smallest k with P <= 0.1.
  std::vector<double> c(n + 1, 0.0);
  c[0] = 1;
  for (std::size_t i = 1; i <= n; ++i)
    for (std::size_t j = i; j > 0; --j) c[j] += c[j - 1];
  const double all = std::ldexp(1.0, static_cast<int>(n));
  double tail = 0;
  std::size_t k = n + 1;
  for (std::size_t j = n; j > n / 2; --j) {
    tail += c[j];
    if (2 * tail / all > 0.1) break;
    k = j;
  }
  return k;
}

/// The rounds that say "faster" (ratio above 1) and "slower" (below 1).
struct round_votes {
  std::size_t faster = 0, slower = 0, rounds = 0;
};
[[nodiscard]] inline round_votes votes_of(const std::vector<double>& ratio) noexcept {
  round_votes v;
  v.rounds = ratio.size();
  for (const double r : ratio) v.faster += r > 1, v.slower += r < 1;
  return v;
}

/// A direction only when enough rounds agree (rounds_needed), else within noise.
[[nodiscard]] inline verdict verdict_of(const round_votes& v) noexcept {
  const std::size_t k = rounds_needed(v.rounds);
  if (v.faster >= k) return verdict::faster;
  if (v.slower >= k) return verdict::slower;
  return verdict::within_noise;
}
[[nodiscard]] inline verdict verdict_of(const std::vector<double>& ratio) noexcept { return verdict_of(votes_of(ratio)); }

[[nodiscard]] inline std::string to_string(verdict v) {
  switch (v) {
    case verdict::faster: return "faster";
    case verdict::slower: return "slower";
    case verdict::within_noise: return "within noise";
    case verdict::baseline: return "baseline";
  }
  return "?";
}

/// The order of n variants in each of `rounds` rounds: a seeded shuffle,
/// rotated by one each round, so each variant runs first, last and between
/// the others equally often and a drift of the machine spreads over all.
[[nodiscard]] inline std::vector<std::vector<std::size_t>> rotation(std::size_t n, std::size_t rounds,
                                                                  std::uint64_t seed) {
  std::vector<std::size_t> base(n);
  std::iota(base.begin(), base.end(), std::size_t{0});
  std::mt19937_64 r(seed);  // (Fisher-Yates by hand: std::shuffle's draws differ between standard libraries)
  for (std::size_t i = n; i > 1; --i) std::swap(base[i - 1], base[static_cast<std::size_t>(r() % i)]);
  std::vector<std::vector<std::size_t>> order(rounds, std::vector<std::size_t>(n));
  for (std::size_t k = 0; k < rounds; ++k)
    for (std::size_t i = 0; i < n; ++i) order[k][i] = base[(i + k) % n];
  return order;
}

}  // namespace dflash::bench
