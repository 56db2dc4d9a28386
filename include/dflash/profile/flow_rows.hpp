#pragma once
// Which profile rows measure an item's lifetime rather than a thread's time:
// the pipeline's flow rows (pipeline/stage.hpp names them). One table, read by
// the report (a lifetime has no share of a thread's wall time) and the trace
// (lifetimes are drawn as flows, not as slices).
#include <array>
#include <string_view>

namespace dflash {

/// The suffixes of flow rows: "<stage>.age", "<sink>.e2e", and the age rows
/// of device stages and clock checks.
inline constexpr std::array<std::string_view, 4> flow_row_suffixes{".age", ".e2e", ".age_gpu_end",
                                                                   ".age_clock_backwards"};

/// True when `name` is a flow row: its total sums item lifetimes, which
/// overlap, so "% of wall" means nothing for it.
[[nodiscard]] constexpr bool is_flow_row(std::string_view name) noexcept {
  for (const std::string_view s : flow_row_suffixes)
    if (name.size() >= s.size() && name.substr(name.size() - s.size()) == s) return true;
  return false;
}

}  // namespace dflash
