#pragma once
// Argument checks shared by the ops (dflash::detail::argument_checks in the
// "dflash::ops::" scope): every violation names the op and the offending value;
// nothing is clamped.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dflash/detail/argument_checks.hpp"

namespace dflash::ops::detail {

inline constexpr dflash::detail::argument_checks checks{"dflash::ops::"};

[[noreturn]] inline void fail(std::string_view op, const std::string& what) { checks.fail(op, what); }
/// A value that does not fit its type (int32 / size_t): std::overflow_error, named like fail().
[[noreturn]] inline void fail_overflow(std::string_view op, const std::string& what) { checks.fail_overflow(op, what); }
inline void require(bool ok, std::string_view op, const std::string& what) { checks.require(ok, op, what); }
inline void require_size(std::size_t got, std::size_t want, std::string_view op, std::string_view name) {
  checks.require_size(got, want, op, name);
}
inline void require_non_negative(std::int64_t v, std::string_view op, std::string_view name) {
  checks.require_non_negative(v, op, name);
}
/// Sum of lengths, each in [0, max_len] (max_len < 0: no upper bound); the sum must fit int32.
inline std::int32_t checked_total(std::span<const std::int32_t> lengths, std::int64_t max_len, std::string_view op,
                                  std::string_view name = "lengths") {
  return checks.checked_total(lengths, max_len, op, name);
}

}  // namespace dflash::ops::detail
