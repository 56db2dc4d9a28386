#pragma once
// A source of 0, 1, ..., n - 1 named "numbers" (n < 0: endless, for tests that
// stop the run): what many pipeline tests feed their stages with, so an item's
// value is its source order.
#include <dflash/pipeline/stage.hpp>

#include <optional>

namespace dflash_test {

struct numbers {
  static constexpr dflash::fixed_string name{"numbers"};
  using input_type = void;
  using output_type = int;
  int n = 0, next = 0;
  std::optional<int> operator()() {
    if (n >= 0 && next >= n) return std::nullopt;
    return next++;
  }
};

}  // namespace dflash_test
