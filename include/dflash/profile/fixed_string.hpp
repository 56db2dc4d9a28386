#pragma once
// A string usable as a template argument, so profiler keys are types and a
// misspelt key is a compile error, never a run-time miss in a hash map.

#include <algorithm>
#include <cstddef>
#include <string_view>

namespace dflash {

template <std::size_t N>
struct fixed_string {
  char data[N + 1]{};

  consteval fixed_string(const char (&s)[N + 1]) noexcept { std::copy_n(s, N + 1, data); }

  static constexpr std::size_t size() noexcept { return N; }
  constexpr std::string_view view() const noexcept { return {data, N}; }
  constexpr operator std::string_view() const noexcept { return view(); }

  template <std::size_t M>
  constexpr bool operator==(const fixed_string<M>& o) const noexcept {
    return view() == o.view();
  }
};

template <std::size_t N>
fixed_string(const char (&)[N]) -> fixed_string<N - 1>;

}  // namespace dflash
