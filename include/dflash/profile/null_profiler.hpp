#pragma once
// NullProfiler: the policy that compiles to nothing. Every member is a
// constexpr noexcept no-op on an empty type, so a stage built with it has the
// same size and the same machine code as an uninstrumented one
// (scripts/zero_cost_check.sh proves the latter with callgrind).

#include <string_view>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash {

struct NullProfiler {
  using keys = any_key;
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = false;
  static constexpr std::string_view policy_name = "dflash::NullProfiler";

  struct token {};
  struct scope_type {
    // A user-provided (if trivial) destructor keeps `auto t = p.scope(k);`
    // free of unused-variable warnings, like a real RAII timer.
    constexpr ~scope_type() {}
  };

  template <Key K>
  constexpr token begin(K) const noexcept { return {}; }
  template <Key K>
  constexpr void end(K, token) const noexcept {}
  template <Key K>
  [[nodiscard]] constexpr scope_type scope(K) const noexcept { return {}; }
  template <Key K, class Rep, class Period>
  constexpr void add(K, std::chrono::duration<Rep, Period>) const noexcept {}
  constexpr void clear() const noexcept {}
};

static_assert(ProfilerPolicy<NullProfiler>);
static_assert(NullPolicy<NullProfiler>);

}  // namespace dflash
