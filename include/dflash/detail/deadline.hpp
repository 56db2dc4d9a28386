#pragma once
// Deadlines from user timeouts, saturated instead of overflowing.

#include <stdexcept>
#include <string>
#include <string_view>

#include "dflash/detail/format.hpp"
#include "dflash/detail/std_chrono.hpp"

namespace dflash::detail {

/// steady_clock::now() + timeout, saturated at time_point::max() ("forever")
/// instead of overflowing; zero or negative = now. The comparison runs in
/// long double, so hours::max() or an infinite duration<double> cannot
/// overflow on the way. A NaN timeout is the caller's bug and throws.
template <class Rep, class Period>
std::chrono::steady_clock::time_point saturating_deadline(std::chrono::duration<Rep, Period> timeout,
                                                          std::string_view who) {
  using sc = std::chrono::steady_clock;
  using ld = std::chrono::duration<long double, std::nano>;
  const auto now = sc::now();
  const ld t = std::chrono::duration_cast<ld>(timeout);
  if (t.count() != t.count()) throw_invalid_argument("%.*s: timeout is NaN", static_cast<int>(who.size()), who.data());
  if (!(t.count() > 0)) return now;
  const ld room = std::chrono::duration_cast<ld>(sc::time_point::max() - now);
  if (t >= room) return sc::time_point::max();
  return now + std::chrono::ceil<sc::duration>(t);
}

}  // namespace dflash::detail
