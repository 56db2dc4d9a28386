#pragma once
// The one capacity limit of dflash's rings (bounded_queue, host_ring,
// device_queue) and of every link depth. Both rings double positions in their
// sequence words (so capacity 1 works), and sequence differences must fit a
// signed 64-bit word: 2^61 slots, far beyond any memory, but checked.

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash::detail {

inline constexpr std::size_t max_ring_capacity = std::size_t{1} << 61;

/// std::invalid_argument "<who>: capacity must be at least 1 (got 0)" or
/// "... at most 2^61 (got N)".
inline void check_capacity(std::size_t capacity, std::string_view who) {
  if (capacity == 0) throw std::invalid_argument(std::string(who) + ": capacity must be at least 1 (got 0)");
  if (capacity > max_ring_capacity)
    throw std::invalid_argument(std::string(who) + ": capacity must be at most 2^61 (got " + std::to_string(capacity) +
                                ")");
}

}  // namespace dflash::detail
