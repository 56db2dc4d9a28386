#pragma once
// The one capacity limit of dflash's rings (bounded_queue, host_ring,
// device_queue) and of every link depth. Both rings double positions in their
// sequence words (so capacity 1 works), and sequence differences must fit a
// signed 64-bit word: 2^61 slots, far beyond any memory, but checked.

#include <cstddef>
#include <string>
#include <string_view>

#include "dflash/detail/format.hpp"

namespace dflash::detail {

inline constexpr std::size_t max_ring_capacity = std::size_t{1} << 61;

[[noreturn]] inline void throw_bad_capacity(std::size_t capacity, std::string_view who) {
  if (capacity == 0)
    throw_invalid_argument("%.*s: capacity must be at least 1 (got 0)", static_cast<int>(who.size()), who.data());
  throw_invalid_argument("%.*s: capacity must be at most 2^61 (got %zu)", static_cast<int>(who.size()), who.data(),
                         capacity);
}

/// std::invalid_argument "<who>: capacity must be at least 1 (got 0)" or
/// "... at most 2^61 (got N)".
inline void check_capacity(std::size_t capacity, std::string_view who) {
  if (capacity == 0 || capacity > max_ring_capacity) throw_bad_capacity(capacity, who);
}
/// The same for a named ring: "<who> '<name>': ...".
inline void check_capacity(std::size_t capacity, std::string_view who, std::string_view name) {
  if (capacity == 0 || capacity > max_ring_capacity) {
    std::string w(who);
    ((w += " '") += name) += "'";
    throw_bad_capacity(capacity, w);
  }
}

}  // namespace dflash::detail
