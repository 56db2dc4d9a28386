#pragma once
// Which profile rows measure an item's lifetime rather than a thread's time:
// the pipeline's flow rows (pipeline/stage.hpp names them). One table, read by
// the report (a lifetime has no share of a thread's wall time) and the trace
// (lifetimes are drawn as flows, not as slices).
#include <array>
#include <string_view>

#include "dflash/profile/key_suffixes.hpp"

namespace dflash {

/// The suffixes of flow rows: "<stage>.age", "<sink>.e2e", and the age rows
/// of device stages and clock checks. The last one counts items whose clock
/// read behind their birth stamp: it holds no time.
inline constexpr std::array<std::string_view, 4> flow_row_suffixes{
    key_suffix::age.view(), key_suffix::e2e.view(), key_suffix::age_gpu_end.view(),
    key_suffix::age_clock_backwards.view()};
inline constexpr std::string_view clock_backwards_suffix = flow_row_suffixes[3];

/// True when `name` is a flow row: its total sums item lifetimes, which
/// overlap, so "% of wall" means nothing for it.
[[nodiscard]] constexpr bool is_flow_row(std::string_view name) noexcept {
  for (const std::string_view s : flow_row_suffixes)
    if (name.size() >= s.size() && name.substr(name.size() - s.size()) == s) return true;
  return false;
}

/// True when `name` is a flow row whose value is a time between two clock
/// readings (an age or an end-to-end time), so it depends on the clocks
/// agreeing; the clock-backwards row is a count of items instead.
[[nodiscard]] constexpr bool is_age_row(std::string_view name) noexcept {
  const std::string_view c = clock_backwards_suffix;
  return is_flow_row(name) && !(name.size() >= c.size() && name.substr(name.size() - c.size()) == c);
}

static_assert(is_age_row("sink.age") && is_age_row("sink.e2e") && is_age_row("gpu.age_gpu_end") &&
              !is_age_row("sink.age_clock_backwards") && is_flow_row("sink.age_clock_backwards") &&
              !is_flow_row("sink.work"));

}  // namespace dflash
