#pragma once
// Human-readable table and JSON for a profile_snapshot.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <string>
#include <string_view>

#include "dflash/detail/format.hpp"
#include "dflash/profile/flow_rows.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash {

enum class report_format { table, json };

namespace detail {
/// Length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no overlongs,
/// no surrogates, <= U+10FFFF), or 0 if the bytes there are not one.
inline std::size_t utf8_sequence(std::string_view s, std::size_t i) noexcept {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char c = b(0);
  std::size_t len;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2;
  else if (c >= 0xE0 && c <= 0xEF) {
    len = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    len = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else
    return 0;
  if (i + len > s.size()) return 0;
  if (b(1) < lo || b(1) > hi) return 0;
  for (std::size_t k = 2; k < len; ++k)
    if ((b(k) & 0xC0) != 0x80) return 0;
  return len;
}

/// A JSON string literal. Bytes that are not well-formed UTF-8 become U+FFFD
/// (one per byte), so the document stays valid whatever the name holds.
inline void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (std::size_t i = 0; i < s.size();) {
    const char c = s[i];
    const std::size_t len = utf8_sequence(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    if (len > 1) {
      out.append(s.substr(i, len));
      i += len;
      continue;
    }
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) append_fmt(out, "\\u%04x", static_cast<unsigned>(c));
        else out += c;
    }
    ++i;
  }
  out += '"';
}

/// A duration with the unit that shows it: "250 ns", "12.500 us", "3.000 ms", "1.250 s".
/// Written into `buf` (24 bytes hold any uint64_t ns); returns buf.
inline const char* human_duration(std::uint64_t ns, char (&buf)[24]) noexcept {
  const double v = static_cast<double>(ns);
  if (ns < 1'000) std::snprintf(buf, sizeof buf, "%llu ns", static_cast<unsigned long long>(ns));
  else if (ns < 1'000'000) std::snprintf(buf, sizeof buf, "%.3f us", v / 1e3);
  else if (ns < 1'000'000'000) std::snprintf(buf, sizeof buf, "%.3f ms", v / 1e6);
  else std::snprintf(buf, sizeof buf, "%.3f s", v / 1e9);
  return buf;
}
inline std::string human_duration(std::uint64_t ns) {
  char buf[24];
  return human_duration(ns, buf);
}
/// " <duration>" right-aligned in a column of `width`.
inline void append_duration_cell(std::string& out, std::uint64_t ns, int width) {
  char buf[24];
  append_fmt(out, " %*s", width, human_duration(ns, buf));
}
}  // namespace detail

/// How a table report is laid out.
struct report_options {
  report_format format = report_format::table;
  /// Also list keys with no record in the window (hidden by default; the
  /// table's footer says how many were hidden).
  bool show_unrecorded = false;
  /// The footer's advice on listing hidden keys: a program with its own
  /// switch for show_unrecorded says it in its own terms (a flag, say).
  std::string_view unrecorded_hint = "report_options::show_unrecorded lists them";
};

/// One row per recorded key: count, then total, mean, p50, p90, p99, max, each
/// with the unit that shows it (ns, us, ms, s), and the key's share of the window's wall time. Footers say
/// that percentiles have bucket resolution, which keys were hidden, and why a
/// share can exceed 100 % (time summed over threads).
inline std::string format_table(const profile_snapshot& s, const report_options& opt = {}) {
  using detail::append_fmt;
  std::size_t w = 5;
  for (const auto& k : s.keys)
    if (k.count || opt.show_unrecorded) w = std::max(w, k.name.size());
  const int wi = static_cast<int>(w);
  std::string out;
  append_fmt(out, "profile over %.3f s\n", static_cast<double>(s.window_ns) / 1e9);
  append_fmt(out, "%-*s %10s %11s %11s %11s %11s %11s %11s %7s\n", wi, "stage", "count", "total", "mean",
             "p50*", "p90*", "p99*", "max", "% wall");
  std::size_t hidden = 0;
  std::string hidden_names;
  bool over_100 = false, flow_rows = false;
  for (const auto& k : s.keys) {
    if (k.count == 0) {
      if (!opt.show_unrecorded) {
        if (hidden++ < 3) (hidden_names += hidden_names.empty() ? "" : ", ") += k.name;
        continue;
      }
      append_fmt(out, "%-*s %10d %11s %11s %11s %11s %11s %11s %7s\n", wi, k.name.c_str(), 0, "-", "-", "-", "-",
                 "-", "-", "-");
      continue;
    }
    const double share =
        s.window_ns ? 100.0 * static_cast<double>(k.total_ns) / static_cast<double>(s.window_ns) : 0.0;
    const bool flow = is_flow_row(k.name);
    flow_rows = flow_rows || flow;
    over_100 = over_100 || (!flow && share > 100.0);
    append_fmt(out, "%-*s %10llu", wi, k.name.c_str(), static_cast<unsigned long long>(k.count));
    for (const std::uint64_t ns : {k.total_ns, static_cast<std::uint64_t>(k.mean_ns() + 0.5), k.p50_ns(), k.p90_ns(),
                                   k.p99_ns(), k.max_ns})
      detail::append_duration_cell(out, ns, 11);
    if (flow)
      append_fmt(out, " %7s\n", "");
    else
      append_fmt(out, " %7.1f\n", share);
  }
  out += "* p50/p90/p99 have histogram-bucket resolution (within 6.25 %); count, total, mean, max are exact\n";
  if (over_100)
    out += "% wall = total / window, summed over threads: above 100 % the key ran on several threads at once"
           " (or add() recorded time measured elsewhere)\n";
  if (flow_rows)
    out += "% wall is left empty for .age / .e2e rows: they sum item lifetimes, which overlap, not a thread's time\n";
  if (hidden) {
    append_fmt(out, "%zu key%s never recorded in this window, hidden (%s%s)", hidden, hidden == 1 ? "" : "s",
               hidden_names.c_str(), hidden > 3 ? ", ..." : "");
    if (!opt.unrecorded_hint.empty()) (out += "; ") += opt.unrecorded_hint;
    out += "\n";
  }
  return out;
}

/// {"window_ns":N,"keys":[{"name":..,"count":..,"total_ns":..,"min_ns":..,
///  "max_ns":..,"mean_ns":..,"p50_ns":..,"p90_ns":..,"p99_ns":..}, ...]}
inline std::string format_json(const profile_snapshot& s) {
  using detail::append_fmt;
  std::string out;
  append_fmt(out, "{\"window_ns\":%llu,\"keys\":[", static_cast<unsigned long long>(s.window_ns));
  bool first = true;
  for (const auto& k : s.keys) {
    if (!first) out += ',';
    first = false;
    out += "{\"name\":";
    detail::append_json_string(out, k.name);
    append_fmt(out,
               ",\"count\":%llu,\"total_ns\":%llu,\"min_ns\":%llu,\"max_ns\":%llu,\"mean_ns\":%.3f,"
               "\"p50_ns\":%llu,\"p90_ns\":%llu,\"p99_ns\":%llu}",
               static_cast<unsigned long long>(k.count), static_cast<unsigned long long>(k.total_ns),
               static_cast<unsigned long long>(k.min_ns), static_cast<unsigned long long>(k.max_ns),
               k.mean_ns(), static_cast<unsigned long long>(k.p50_ns()),
               static_cast<unsigned long long>(k.p90_ns()), static_cast<unsigned long long>(k.p99_ns()));
  }
  out += "]}";
  return out;
}

inline std::string format_report(const profile_snapshot& s, const report_options& o) {
  return o.format == report_format::json ? format_json(s) : format_table(s, o);
}
inline std::string format_report(const profile_snapshot& s, report_format f) {
  return format_report(s, report_options{f});
}

}  // namespace dflash
