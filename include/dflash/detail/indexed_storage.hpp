#pragma once
// detail::indexed_storage<T...>: one object of each type, reached by index —
// what a pipeline keeps per stage and per link. Not std::tuple: its recursive
// implementation instantiates a base class, constructors and accessors per
// element and per prefix in every pipeline type of every TU, where this
// is one flat class with a base per element (docs/bench/compile_time.md).
// No comparison, no assignment, no structured bindings: storage only.

#include <cstddef>
#include <type_traits>
#include <utility>

namespace dflash::detail {

template <std::size_t I, class T>
struct indexed_element {
  indexed_element() = default;
  template <class A>
  explicit indexed_element(A&& a) : value(std::forward<A>(a)) {}
  [[no_unique_address]] T value{};
};

template <class Seq, class... T>
struct indexed_storage_of;
template <std::size_t... I, class... T>
struct indexed_storage_of<std::index_sequence<I...>, T...> : indexed_element<I, T>... {
  indexed_storage_of() = default;
  /// Each element from its argument, in order. (Never a copy or move of a
  /// one-element storage: that is the copy and move constructors' work.)
  template <class... A>
    requires(sizeof...(A) == sizeof...(T) && sizeof...(T) > 0 &&
             !(sizeof...(A) == 1 && (std::is_same_v<std::remove_cvref_t<A>, indexed_storage_of> && ...)))
  explicit indexed_storage_of(A&&... a) : indexed_element<I, T>(std::forward<A>(a))... {}
};

template <class... T>
using indexed_storage = indexed_storage_of<std::index_sequence_for<T...>, T...>;

/// Element I (deduced from the one base indexed I).
template <std::size_t I, class T>
[[nodiscard]] constexpr T& get(indexed_element<I, T>& e) noexcept {
  return e.value;
}
template <std::size_t I, class T>
[[nodiscard]] constexpr const T& get(const indexed_element<I, T>& e) noexcept {
  return e.value;
}

}  // namespace dflash::detail
