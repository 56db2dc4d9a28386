#pragma once
// printf-style text for reports and error messages. C variadics, not
// templates: every message in every header shares these few functions, so a
// check costs one call where it stands instead of an inlined chain of
// std::string concatenations compiled into each pipeline type of each TU.

#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace dflash::detail {

/// vprintf into `out`, however long the result (a fixed buffer would cut long rows).
inline void append_vfmt(std::string& out, const char* fmt, std::va_list args) {
  char buf[256];
  std::va_list again;
  va_copy(again, args);
  const int n = std::vsnprintf(buf, sizeof buf, fmt, args);
  if (n > 0 && static_cast<std::size_t>(n) < sizeof buf) {
    out.append(buf, static_cast<std::size_t>(n));
  } else if (n > 0) {
    const std::size_t at = out.size();
    out.resize(at + static_cast<std::size_t>(n) + 1);
    std::vsnprintf(out.data() + at, static_cast<std::size_t>(n) + 1, fmt, again);
    out.resize(at + static_cast<std::size_t>(n));
  }
  va_end(again);
}

/// printf into `out`.
[[gnu::format(printf, 2, 3)]] inline void append_fmt(std::string& out, const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  append_vfmt(out, fmt, args);
  va_end(args);
}

/// vprintf into a new string.
inline std::string vformatted(const char* fmt, std::va_list args) {
  std::string out;
  append_vfmt(out, fmt, args);
  return out;
}

/// printf into a new string.
[[gnu::format(printf, 1, 2)]] inline std::string formatted(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::string out = vformatted(fmt, args);
  va_end(args);
  return out;
}

/// std::invalid_argument with a printf-style message (bad input a caller can fix).
[[noreturn, gnu::format(printf, 1, 2), gnu::cold]] inline void throw_invalid_argument(const char* fmt, ...) {
  std::va_list args;
  va_start(args, fmt);
  std::invalid_argument e(vformatted(fmt, args));
  va_end(args);
  throw e;
}

}  // namespace dflash::detail
