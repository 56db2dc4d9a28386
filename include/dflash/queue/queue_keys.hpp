#pragma once
// Compile-time key names derived from a queue's (or stage's) name:
//   queue_keys<"hs_queue"> == key_set<"hs_queue.push_wait", "hs_queue.pop_wait">
// so a pipeline's full key set is known before any profiler exists.

#include <cstddef>

#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/key_suffixes.hpp"
#include "dflash/profile/key.hpp"

namespace dflash {

namespace detail {
template <fixed_string A, fixed_string B>
consteval auto fixed_string_cat() {
  char buf[A.size() + B.size() + 1]{};
  for (std::size_t i = 0; i < A.size(); ++i) buf[i] = A.data[i];
  for (std::size_t i = 0; i < B.size(); ++i) buf[A.size() + i] = B.data[i];
  return fixed_string<A.size() + B.size()>(buf);
}
}  // namespace detail

/// `name_cat<"hs", key_suffix::pop_wait>` == fixed_string "hs.pop_wait".
template <fixed_string A, fixed_string B>
inline constexpr auto name_cat = detail::fixed_string_cat<A, B>();

/// Key under which a queue named Name records time blocked in push().
template <fixed_string Name>
using push_wait_key = key_t<name_cat<Name, key_suffix::push_wait>>;
/// Key under which a queue named Name records time blocked in pop().
template <fixed_string Name>
using pop_wait_key = key_t<name_cat<Name, key_suffix::pop_wait>>;

/// The keys a profiled bounded_queue named Name records; concatenate with
/// key_set_cat_t to build a profiler's key set.
template <fixed_string Name>
using queue_keys = key_set<name_cat<Name, key_suffix::push_wait>, name_cat<Name, key_suffix::pop_wait>>;

static_assert(name_cat<"hs", key_suffix::pop_wait>.view() == "hs.pop_wait");
static_assert(queue_keys<"q">::names[0] == "q.push_wait" && queue_keys<"q">::names[1] == "q.pop_wait");

}  // namespace dflash
