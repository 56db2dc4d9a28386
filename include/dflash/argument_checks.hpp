#pragma once
// dflash::argument_checks: checks of a caller's arguments that name the
// caller, for code built on dflash as for dflash's own ops. Every violation
// throws (std::invalid_argument; std::overflow_error for a value that does
// not fit its type) with "<scope><op>: <what>"; nothing is clamped.
//
//   inline constexpr dflash::argument_checks checks{"my_model::"};
//   checks.require(n > 0, "forward", "n = " + std::to_string(n) + " must be positive");
//   checks.require_size(x.size(), n, "forward", "x");
//
// (Its members: dflash/detail/argument_checks.hpp.)

#include "dflash/detail/argument_checks.hpp"

namespace dflash {
using detail::argument_checks;
}  // namespace dflash
