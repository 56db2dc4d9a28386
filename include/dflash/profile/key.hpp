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
#include <utility>

#include "dflash/profile/fixed_string.hpp"

namespace dflash {

// Traits below test member tags rather than partial specialisations: nvcc 13
// fails to match `key_t<N>` patterns on class-type template arguments.
template <fixed_string Name>
struct key_t {
  using dflash_key_tag = void;
  static constexpr auto value = Name;
  static constexpr std::string_view name() noexcept { return Name.view(); }
};

/// `dflash::key<"forward">` — the value form of a key.
template <fixed_string Name>
inline constexpr key_t<Name> key{};

// clang 14 (Debian 12) never emits a `consteval` literal operator template
// named inside a template: the program fails to link (undefined reference to
// operator""_key<...>). There the operator is a constexpr function that is
// always inlined, so `"row"_key` still costs nothing at any optimisation level
// (scripts/zero_cost_check.sh runs with g++ and clang). Elsewhere it stays
// consteval: a key is a compile-time value by construction.
#if defined(__clang__) && !defined(__CUDACC__)
#define DFLASH_KEY_LITERAL [[gnu::always_inline]] constexpr
#else
#define DFLASH_KEY_LITERAL consteval
#endif

namespace literals {
/// `"forward"_key` — the literal form of a key.
template <fixed_string Name>
DFLASH_KEY_LITERAL key_t<Name> operator""_key() noexcept {
  return {};
}
}  // namespace literals

template <class T>
concept Key = requires { typename std::remove_cvref_t<T>::dflash_key_tag; };

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

  using dflash_key_set_tag = void;
  static constexpr std::size_t size = sizeof...(Names);
  static constexpr std::array<std::string_view, size> names{Names.view()...};

  /// Any member key, used by concepts to probe a policy's interface.
  using probe = key_t<detail::first_name<Names...>::value>;

  // Lookups take the name as a string_view: deducing a fixed_string template
  // argument is what nvcc's front end gets wrong, so none is deduced here.
  static constexpr bool contains(std::string_view k) noexcept {
    for (auto n : names)
      if (n == k) return true;
    return false;
  }
  /// Position of `k` in the set; `size` when absent.
  static constexpr std::size_t index_of(std::string_view k) noexcept {
    std::size_t i = 0;
    while (i < size && names[i] != k) ++i;
    return i;
  }

  /// F<Names...>: hands the names to another template (used by concatenation).
  template <template <fixed_string...> class F>
  using apply = F<Names...>;
  template <fixed_string... More>
  using append = key_set<Names..., More...>;
};

/// The key set of a policy that records nothing: every key is accepted.
struct any_key {
  using dflash_key_set_tag = void;
  using probe = key_t<"probe">;
  static constexpr bool contains(std::string_view) noexcept { return true; }
};

/// A key_set, or any_key.
template <class T>
concept KeySet = requires { typename T::dflash_key_set_tag; };

/// A closed key_set (not any_key): what a stateful profiler records.
template <class T>
concept ClosedKeySet = KeySet<T> && requires { T::size; };

template <class T>
struct is_key_set : std::bool_constant<ClosedKeySet<T>> {};

namespace detail {
/// A key's name as a character pack, for diagnostics only: clang prints a
/// fixed_string template argument as character codes ({{102, 114, ...}}) but
/// a char pack as letters ('f', 'r', ...), so a failed key check names the key
/// in its first error line with clang as g++ does with the fixed_string.
template <char... C>
struct key_named {};
template <class K, std::size_t... I>
auto spell_key(std::index_sequence<I...>) -> key_named<K::value.data[I]...>;
template <class K>
using key_spelling = decltype(spell_key<K>(std::make_index_sequence<K::value.size()>{}));

template <class Spelling, bool Listed>
inline constexpr bool key_listed = Listed;

template <class Spelling, bool Listed>
struct key_check {
  static_assert(key_listed<Spelling, Listed>,
                "dflash: this key is not in the profiler's key_set — misspelt, or add it to the key_set "
                "(the key's name is the key_named<...> argument)");
};
template <class Spelling, bool Listed>
struct composite_key_check {
  static_assert(key_listed<Spelling, Listed>,
                "dflash: this key is not accepted by every enabled member of the Composite — misspelt, or "
                "missing from one member's key_set (the key's name is the key_named<...> argument)");
};
template <class Spelling, bool Listed>
struct declared_key_check {
  static_assert(key_listed<Spelling, Listed>,
                "dflash: this key is not among the keys the stage declared (profiler_ref<P, Keys>) — misspelt, "
                "or add it to the stage's keys (the key's name is the key_named<...> argument)");
};
}  // namespace detail

/// The compile-time check every stateful policy makes on every key it is given
/// (Check says whose key set it is: a profiler's, a Composite's, a stage's).
/// The key is spelt out only when it is missing (no cost to a good key).
template <KeySet Keys, Key K, template <class, bool> class Check = detail::key_check>
constexpr void require_key() noexcept {
  if constexpr (!Keys::contains(K::name())) (void)Check<detail::key_spelling<K>, false>{};
}

/// Concatenate key sets (e.g. a pipeline's keys with its stages' own keys).
template <ClosedKeySet... Sets>
struct key_set_cat;
template <ClosedKeySet A>
struct key_set_cat<A> {
  using type = A;
};
template <ClosedKeySet A, ClosedKeySet B, ClosedKeySet... Rest>
struct key_set_cat<A, B, Rest...> : key_set_cat<typename B::template apply<A::template append>, Rest...> {};
template <ClosedKeySet... Sets>
using key_set_cat_t = typename key_set_cat<Sets...>::type;

}  // namespace dflash
