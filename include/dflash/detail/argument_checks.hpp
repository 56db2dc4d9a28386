#pragma once
// argument_checks: checks of a caller's arguments that name the caller. Every
// violation throws (std::invalid_argument, or std::overflow_error for a value
// that does not fit its type) with the message "<scope><op>: <what>"; nothing
// is clamped. The scope names the area (the ops use "dflash::ops::"), so one
// set of checks serves the library and code built on it.

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

namespace dflash::detail {

class argument_checks {
 public:
  explicit constexpr argument_checks(std::string_view scope) noexcept : scope_(scope) {}

  [[noreturn]] void fail(std::string_view op, const std::string& what) const {
    throw std::invalid_argument(message(op, what));
  }
  /// A value that does not fit its type (int32 / size_t).
  [[noreturn]] void fail_overflow(std::string_view op, const std::string& what) const {
    throw std::overflow_error(message(op, what));
  }

  void require(bool ok, std::string_view op, const std::string& what) const {
    if (!ok) fail(op, what);
  }
  void require_size(std::size_t got, std::size_t want, std::string_view op, std::string_view name) const {
    if (got != want)
      fail(op, std::string(name) + " has " + std::to_string(got) + " elements, expected " + std::to_string(want));
  }
  void require_non_negative(std::int64_t v, std::string_view op, std::string_view name) const {
    if (v < 0) fail(op, std::string(name) + " = " + std::to_string(v) + " is negative");
  }

  /// Sum of lengths, each in [0, max_len] (max_len < 0: no upper bound); the sum must fit int32.
  std::int32_t checked_total(std::span<const std::int32_t> lengths, std::int64_t max_len, std::string_view op,
                             std::string_view name = "lengths") const {
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

 private:
  [[nodiscard]] std::string message(std::string_view op, const std::string& what) const {
    return std::string(scope_) + std::string(op) + ": " + what;
  }
  std::string_view scope_;
};

}  // namespace dflash::detail
