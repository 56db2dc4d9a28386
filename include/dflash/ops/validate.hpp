#pragma once
// Argument checks shared by the ops: every violation is a std::invalid_argument
// whose message names the op and the offending value; nothing is clamped.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash::ops::detail {

[[noreturn]] inline void fail(std::string_view op, const std::string& what) {
  throw std::invalid_argument("dflash::ops::" + std::string(op) + ": " + what);
}

/// A value that does not fit its type (int32 / size_t): std::overflow_error, named like fail().
[[noreturn]] inline void fail_overflow(std::string_view op, const std::string& what) {
  throw std::overflow_error("dflash::ops::" + std::string(op) + ": " + what);
}

inline void require(bool ok, std::string_view op, const std::string& what) {
  if (!ok) fail(op, what);
}

inline void require_size(std::size_t got, std::size_t want, std::string_view op, std::string_view name) {
  if (got != want)
    fail(op, std::string(name) + " has " + std::to_string(got) + " elements, expected " + std::to_string(want));
}

inline void require_non_negative(std::int64_t v, std::string_view op, std::string_view name) {
  if (v < 0) fail(op, std::string(name) + " = " + std::to_string(v) + " is negative");
}

/// Sum of lengths, each in [0, max_len] (max_len < 0: no upper bound); the sum must fit int32.
inline std::int32_t checked_total(std::span<const std::int32_t> lengths, std::int64_t max_len, std::string_view op,
                                  std::string_view name = "lengths") {
  const std::string n(name);
  std::int64_t total = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const std::int64_t l = lengths[i];
    if (l < 0) fail(op, n + "[" + std::to_string(i) + "] = " + std::to_string(l) + " is negative");
    if (max_len >= 0 && l > max_len)
      fail(op, n + "[" + std::to_string(i) + "] = " + std::to_string(l) + " exceeds seq = " + std::to_string(max_len));
    total += l;
  }
  if (total > std::numeric_limits<std::int32_t>::max())
    fail(op, "total length " + std::to_string(total) + " does not fit int32");
  return static_cast<std::int32_t>(total);
}

}  // namespace dflash::ops::detail
