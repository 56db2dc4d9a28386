#pragma once
// Compile-time profiler keys and key sets.
//
//   using namespace dflash::literals;
//   using keys = dflash::key_set<"forward", "pack">;
//   auto t = prof.scope("forward"_key);     // key_t<"forward">, an empty type
//
// A key is an empty type, so passing it costs nothing and the accumulating
// policy turns it into a fixed array index at compile time.

#include <array>
#include <cstddef>
#include <string_view>
#include <type_traits>

#include "dflash/profile/fixed_string.hpp"

namespace dflash {

template <fixed_string Name>
struct key_t {
  static constexpr std::string_view name() noexcept { return Name.view(); }
};

/// `dflash::key<"forward">` — the value form of a key.
template <fixed_string Name>
inline constexpr key_t<Name> key{};

namespace literals {
/// `"forward"_key` — the literal form of a key.
template <fixed_string Name>
consteval key_t<Name> operator""_key() noexcept {
  return {};
}
}  // namespace literals

template <class T>
struct is_key : std::false_type {};
template <fixed_string Name>
struct is_key<key_t<Name>> : std::true_type {};

template <class T>
concept Key = is_key<std::remove_cvref_t<T>>::value;

namespace detail {
template <fixed_string... Names>
consteval bool all_distinct() {
  constexpr std::array<std::string_view, sizeof...(Names)> v{Names.view()...};
  for (std::size_t i = 0; i < v.size(); ++i)
    for (std::size_t j = i + 1; j < v.size(); ++j)
      if (v[i] == v[j]) return false;
  return true;
}

template <fixed_string First, fixed_string...>
struct first_name {
  static constexpr auto value = First;
};
}  // namespace detail

/// The closed set of keys a stateful profiler records. Order is report order.
template <fixed_string... Names>
struct key_set {
  static_assert(sizeof...(Names) > 0, "dflash::key_set needs at least one key");
  static_assert(detail::all_distinct<Names...>(), "dflash::key_set: duplicate key name");

  static constexpr std::size_t size = sizeof...(Names);
  static constexpr std::array<std::string_view, size> names{Names.view()...};

  /// Any member key, used by concepts to probe a policy's interface.
  using probe = key_t<detail::first_name<Names...>::value>;

  template <fixed_string K>
  static constexpr bool contains = ((K.view() == Names.view()) || ...);

  template <fixed_string K>
  static consteval std::size_t index_of() noexcept {
    std::size_t i = 0;
    ((Names.view() == K.view() ? false : (++i, true)) && ...);
    return i;
  }
};

/// The key set of a policy that records nothing: every key is accepted.
struct any_key {
  using probe = key_t<"probe">;
  template <fixed_string K>
  static constexpr bool contains = true;
};

template <class T>
struct is_key_set : std::false_type {};
template <fixed_string... N>
struct is_key_set<key_set<N...>> : std::true_type {};

template <class T>
concept KeySet = is_key_set<T>::value || std::is_same_v<T, any_key>;

/// Concatenate key sets (e.g. a pipeline's keys with its stages' own keys).
template <class... Sets>
struct key_set_cat;
template <fixed_string... A>
struct key_set_cat<key_set<A...>> {
  using type = key_set<A...>;
};
template <fixed_string... A, fixed_string... B, class... Rest>
struct key_set_cat<key_set<A...>, key_set<B...>, Rest...>
    : key_set_cat<key_set<A..., B...>, Rest...> {};
template <class... Sets>
using key_set_cat_t = typename key_set_cat<Sets...>::type;

}  // namespace dflash
