#pragma once
// One profile for an MPI job: every rank's profile_snapshot side by side,
// merged per key, with the spread over ranks (which rank is the straggler).
// Pure values and formatting, no MPI: the transport is in job.hpp.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dflash/mpi/clock_estimate.hpp"
#include "dflash/profile/flow_rows.hpp"
#include "dflash/profile/histogram.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash::mpi {

/// FNV-1a over the key names in order (each followed by '\0'): equal on two
/// ranks exactly when their profilers have the same keys in the same layout.
constexpr std::uint64_t key_set_hash(const auto& names) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (std::string_view n : names) {
    for (char c : n) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
    h = (h ^ 0u) * 1099511628211ull;
  }
  return h;
}

/// A snapshot as a flat array of words (for MPI): window, key count, then per
/// key count, total, min, max and the histogram. Names are not sent: the key
/// set was checked equal on every rank at start-up.
inline std::vector<std::uint64_t> encode_snapshot(const profile_snapshot& s) {
  std::vector<std::uint64_t> w;
  w.reserve(2 + s.keys.size() * (4 + histogram::bucket_count));
  w.push_back(s.window_ns);
  w.push_back(s.keys.size());
  for (const auto& k : s.keys) {
    w.insert(w.end(), {k.count, k.total_ns, k.min_ns, k.max_ns});
    if (k.buckets.size() != histogram::bucket_count)
      throw std::logic_error("dflash::mpi::encode_snapshot: unexpected histogram size");
    w.insert(w.end(), k.buckets.begin(), k.buckets.end());
  }
  return w;
}

/// Inverse of encode_snapshot; `names` are this rank's key names (same layout).
inline profile_snapshot decode_snapshot(const std::uint64_t* w, std::size_t n, const std::vector<std::string>& names) {
  auto bad = [] { throw std::runtime_error("dflash::mpi: malformed profile snapshot received"); };
  if (n < 2) bad();
  profile_snapshot s;
  s.window_ns = w[0];
  const std::size_t keys = w[1];
  const std::size_t per = 4 + histogram::bucket_count;
  if (keys != names.size() || n != 2 + keys * per) bad();
  s.keys.resize(keys);
  for (std::size_t i = 0; i < keys; ++i) {
    const std::uint64_t* p = w + 2 + i * per;
    key_stats& k = s.keys[i];
    k.name = names[i];
    k.count = p[0];
    k.total_ns = p[1];
    k.min_ns = p[2];
    k.max_ns = p[3];
    k.buckets.assign(p + 4, p + per);
  }
  return s;
}

/// Every rank's snapshot (an empty snapshot for a rank not heard from yet),
/// and a rank's error if it failed.
struct job_profile {
  std::vector<profile_snapshot> ranks;
  std::vector<bool> heard;  // a snapshot arrived from this rank
  std::vector<std::string> errors;  // per rank; empty = ok
  /// Per rank: its profiler clock against rank 0's (clock_offset.hpp); empty
  /// when no rank's profiler stamps items.
  std::vector<clock_estimate> clocks;

  /// Some rank's clock offset could not be estimated: the age rows of items
  /// that crossed ranks compare unaligned clocks.
  [[nodiscard]] bool clocks_estimated() const {
    return std::any_of(clocks.begin(), clocks.end(), [](const clock_estimate& c) { return !c.ok; });
  }

  /// Statistics of all ranks merged per key (counts and totals add up, min/max
  /// over ranks, histograms add); the window is the longest rank's.
  profile_snapshot merged() const {
    profile_snapshot m;
    for (const auto& r : ranks) {
      m.window_ns = std::max(m.window_ns, r.window_ns);
      if (m.keys.empty()) {
        m.keys = r.keys;
        continue;
      }
      for (std::size_t i = 0; i < m.keys.size() && i < r.keys.size(); ++i) m.keys[i] += r.keys[i];
    }
    return m;
  }

  /// Over the ranks that recorded key i: min / median / max of their mean per
  /// call, and the rank with the largest mean (the straggler). Ranks with no
  /// record of the key (e.g. a drafter rank for a target key) are left out.
  struct spread {
    std::size_t ranks_with_key = 0;
    double min_mean_ns = 0, median_mean_ns = 0, max_mean_ns = 0;
    int slowest_rank = -1;
  };
  spread spread_of(std::size_t i) const {
    spread s;
    std::vector<double> means;
    for (std::size_t r = 0; r < ranks.size(); ++r) {
      if (i >= ranks[r].keys.size() || ranks[r].keys[i].count == 0) continue;
      const double m = ranks[r].keys[i].mean_ns();
      if (s.slowest_rank < 0 || m > s.max_mean_ns) {
        s.max_mean_ns = m;
        s.slowest_rank = static_cast<int>(r);
      }
      means.push_back(m);
    }
    s.ranks_with_key = means.size();
    if (means.empty()) return s;
    std::sort(means.begin(), means.end());
    s.min_mean_ns = means.front();
    const std::size_t h = means.size() / 2;
    s.median_mean_ns = means.size() % 2 ? means[h] : (means[h - 1] + means[h]) / 2;
    return s;
  }
};

namespace detail {
/// "+12.3 us ± 0.4 us": an offset and its bound, signed, in µs.
inline std::string offset_text(const clock_estimate& c) {
  char b[96];
  std::snprintf(b, sizeof b, "%+.1f us ± %.1f us", static_cast<double>(c.offset_ns) / 1e3,
                static_cast<double>(c.error_ns) / 1e3);
  return b;
}
inline std::string rank_label(long r) {  // "r<r>" (snprintf: GCC 12 -Wrestrict trips on "r" + to_string)
  char b[24];
  std::snprintf(b, sizeof b, "r%ld", r);
  return b;
}
}  // namespace detail

/// Per-rank columns are printed up to this many ranks (the spread columns always).
inline constexpr std::size_t job_table_rank_columns = 8;

/// One table: merged stats per key, the spread of the per-rank mean over ranks
/// with the slowest rank, and (for small jobs) each rank's mean in its own column.
/// Every duration cell has the unit that shows it (ns, us, ms, s), as in the
/// single-process table: a 20 us mean is never a 0.000 in a millisecond column.
inline std::string format_job_table(const job_profile& j) {
  using dflash::detail::append_fmt;
  auto dur = [](double ns) { return dflash::detail::human_duration(static_cast<std::uint64_t>(ns + 0.5)); };
  const profile_snapshot m = j.merged();
  const std::size_t n = j.ranks.size();
  const bool per_rank = n <= job_table_rank_columns;
  // Ages that compare clocks whose offset is unknown are marked "~" (see the note below the table).
  const bool estimated = j.clocks_estimated();
  auto row_name = [&](const std::string& name) { return estimated && is_age_row(name) ? name + "~" : name; };
  std::size_t w = 5;
  for (const auto& k : m.keys) w = std::max(w, row_name(k.name).size());
  const int wi = static_cast<int>(w);
  std::string out;
  append_fmt(out, "job profile: %zu ranks, longest window %.3f s (mean per call over ranks; r<i> = rank i)\n", n,
             static_cast<double>(m.window_ns) / 1e9);
  append_fmt(out, "%-*s %10s %11s %11s %11s %11s %11s | %11s %11s %11s %7s", wi, "stage", "count", "total", "mean",
             "p50*", "p99*", "max", "rank min", "median", "max", "slowest");
  if (per_rank)
    for (std::size_t r = 0; r < n; ++r) append_fmt(out, " %11s", detail::rank_label(static_cast<long>(r)).c_str());
  out += '\n';
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    const key_stats& k = m.keys[i];
    if (k.count == 0) {
      append_fmt(out, "%-*s %10d %11s %11s %11s %11s %11s | %11s %11s %11s %7s", wi, row_name(k.name).c_str(), 0, "-", "-", "-",
                 "-", "-", "-", "-", "-", "-");
    } else {
      const auto s = j.spread_of(i);
      append_fmt(out, "%-*s %10llu %11s %11s %11s %11s %11s | %11s %11s %11s %7s", wi, row_name(k.name).c_str(),
                 static_cast<unsigned long long>(k.count), dur(static_cast<double>(k.total_ns)).c_str(),
                 dur(k.mean_ns()).c_str(), dur(static_cast<double>(k.p50_ns())).c_str(),
                 dur(static_cast<double>(k.p99_ns())).c_str(), dur(static_cast<double>(k.max_ns)).c_str(),
                 dur(s.min_mean_ns).c_str(), dur(s.median_mean_ns).c_str(), dur(s.max_mean_ns).c_str(),
                 detail::rank_label(s.slowest_rank).c_str());
    }
    if (per_rank)
      for (std::size_t r = 0; r < n; ++r) {
        const bool has = i < j.ranks[r].keys.size() && j.ranks[r].keys[i].count;
        append_fmt(out, " %11s", has ? dur(j.ranks[r].keys[i].mean_ns()).c_str() : "-");
      }
    out += '\n';
  }
  out += "* p50/p99 have histogram-bucket resolution (within 6.25 %); the rest is exact\n";
  for (std::size_t r = 1; r < j.clocks.size(); ++r) {
    const clock_estimate& c = j.clocks[r];
    if (c.ok) append_fmt(out, "rank %zu: clock offset to rank 0: %s\n", r, detail::offset_text(c).c_str());
    else
      append_fmt(out, "rank %zu: clock offset to rank 0 could not be estimated: %s (best guess %s)\n", r,
                 c.why.c_str(), detail::offset_text(c).c_str());
  }
  if (estimated)
    out += "~ estimated: a clock offset could not be estimated, so the ages of items that crossed ranks (stages "
           "after a net_link) compare clocks that may not be aligned\n";
  for (std::size_t r = 0; r < n; ++r) {
    if (r < j.heard.size() && !j.heard[r]) append_fmt(out, "rank %zu: no profile received yet\n", r);
    if (r < j.errors.size() && !j.errors[r].empty())
      append_fmt(out, "rank %zu failed: %s\n", r, j.errors[r].c_str());
  }
  return out;
}

/// {"ranks":N,"merged":<format_json of merged()>,"keys":[{"name":..,
///  "rank_min_mean_ns":..,"rank_median_mean_ns":..,"rank_max_mean_ns":..,
///  "slowest_rank":..,"per_rank":[{"count":..,"total_ns":..,"mean_ns":..},..]},..],
///  "estimated":true when an age row compares clocks not aligned (a failed offset estimate)},..],
///  "clocks":[{"rank":..,"offset_ns":..,"error_ns":..,"ok":..,"why":..},..] (empty without flow stamps),
///  "errors":[{"rank":..,"what":..},..]}
inline std::string format_job_json(const job_profile& j) {
  using dflash::detail::append_fmt;
  const profile_snapshot m = j.merged();
  const bool estimated = j.clocks_estimated();
  std::string out;
  append_fmt(out, "{\"ranks\":%zu,\"merged\":", j.ranks.size());
  out += format_json(m);
  out += ",\"keys\":[";
  for (std::size_t i = 0; i < m.keys.size(); ++i) {
    if (i) out += ',';
    const auto s = j.spread_of(i);
    out += "{\"name\":";
    dflash::detail::append_json_string(out, m.keys[i].name);
    append_fmt(out, ",\"rank_min_mean_ns\":%.3f,\"rank_median_mean_ns\":%.3f,\"rank_max_mean_ns\":%.3f,\"slowest_rank\":%d",
               s.min_mean_ns, s.median_mean_ns, s.max_mean_ns, s.slowest_rank);
    if (estimated && is_age_row(m.keys[i].name)) out += ",\"estimated\":true";
    out += ",\"per_rank\":[";
    for (std::size_t r = 0; r < j.ranks.size(); ++r) {
      if (r) out += ',';
      const key_stats none;
      const key_stats& k = i < j.ranks[r].keys.size() ? j.ranks[r].keys[i] : none;
      append_fmt(out, "{\"count\":%llu,\"total_ns\":%llu,\"mean_ns\":%.3f}", static_cast<unsigned long long>(k.count),
                 static_cast<unsigned long long>(k.total_ns), k.mean_ns());
    }
    out += "]}";
  }
  out += "],\"clocks\":[";
  for (std::size_t r = 0; r < j.clocks.size(); ++r) {
    const clock_estimate& c = j.clocks[r];
    append_fmt(out, "%s{\"rank\":%zu,\"offset_ns\":%lld,\"error_ns\":%lld,\"ok\":%s,\"why\":", r ? "," : "", r,
               static_cast<long long>(c.offset_ns), static_cast<long long>(c.error_ns), c.ok ? "true" : "false");
    dflash::detail::append_json_string(out, c.why);
    out += '}';
  }
  out += "],\"errors\":[";
  bool first = true;
  for (std::size_t r = 0; r < j.errors.size(); ++r) {
    if (j.errors[r].empty()) continue;
    if (!first) out += ',';
    first = false;
    append_fmt(out, "{\"rank\":%zu,\"what\":", r);
    dflash::detail::append_json_string(out, j.errors[r]);
    out += '}';
  }
  out += "]}";
  return out;
}

}  // namespace dflash::mpi
