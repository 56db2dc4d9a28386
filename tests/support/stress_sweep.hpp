#pragma once
// The loop every randomized family runs: scenarios drawn from (seed, index)
// until a time budget is spent, or the one scenario asked for.
//
//   DFLASH_STRESS_SEED=<n>     seed (default: from the clock; printed first)
//   DFLASH_STRESS_INDEX=<i>    replay one scenario of that seed only
//   DFLASH_STRESS_SECONDS=<s>  time budget for new scenarios (default 3)
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace dflash_test {

inline std::uint64_t env_u64(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

/// Calls one(seed, index) -> "" or what broke, for each scenario; the first
/// broken one fails the test with its replay line. Returns the scenarios run.
template <class One>
std::uint64_t sweep(const char* family, One&& one) {
  const std::uint64_t seed = env_u64(
      "DFLASH_STRESS_SEED", static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  const char* only = std::getenv("DFLASH_STRESS_INDEX");
  const auto budget = std::chrono::seconds(env_u64("DFLASH_STRESS_SECONDS", 3));
  std::printf("%s: DFLASH_STRESS_SEED=%llu\n", family, static_cast<unsigned long long>(seed));
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t i = only && *only ? std::strtoull(only, nullptr, 10) : 0, n = 0;
  for (;; ++i, ++n) {
    if (only && *only ? n == 1 : std::chrono::steady_clock::now() - t0 >= budget) break;
    const std::string err = one(seed, i);
    if (!err.empty()) {
      FAIL_CHECK(family << ": " << err << "\n  replay: " << seed << "/" << i << " (DFLASH_STRESS_SEED=" << seed
                        << " DFLASH_STRESS_INDEX=" << i << ")");
      return n;
    }
  }
  std::printf("%s: %llu scenarios passed\n", family, static_cast<unsigned long long>(n));
  CHECK(n > 0);
  return n;
}

}  // namespace dflash_test
