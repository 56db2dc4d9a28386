#pragma once
// Stages written as functions: the types are deduced from the call signature.
//
//   auto square = dflash::stage<"square">([](int x) { return 1LL * x * x; });   // transform int -> long long
//   auto source = dflash::stage<"numbers">([&]() -> std::optional<int> { ... });  // source: returns optional<T>
//   auto sink   = dflash::stage<"sum">([&](long long v) { total += v; });        // sink: returns void
//
// The result is an ordinary stage (name, input_type, output_type, call
// operator), so it goes wherever a class stage goes: into dflash::Pipeline,
// dflash::workers / parallel, dflash::in_order, make_pipeline. Stages with
// their own state and their own profiler keys stay classes.

#include <concepts>
#include <cstddef>
#include <optional>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dflash/profile/fixed_string.hpp"

namespace dflash {

namespace detail {
template <class F>
struct call_signature {
  static constexpr bool known = false;
};
template <class F>
  requires requires { &F::operator(); }
struct call_signature<F> : call_signature<decltype(&F::operator())> {};
template <class R, class... A>
struct call_signature<R (*)(A...)> {
  static constexpr bool known = true;
  using result = R;
  using args = std::tuple<A...>;
};
template <class R, class... A>
struct call_signature<R (*)(A...) noexcept> : call_signature<R (*)(A...)> {};
template <class R, class C, class... A>
struct call_signature<R (C::*)(A...)> : call_signature<R (*)(A...)> {};
template <class R, class C, class... A>
struct call_signature<R (C::*)(A...) const> : call_signature<R (*)(A...)> {};
template <class R, class C, class... A>
struct call_signature<R (C::*)(A...) noexcept> : call_signature<R (*)(A...)> {};
template <class R, class C, class... A>
struct call_signature<R (C::*)(A...) const noexcept> : call_signature<R (*)(A...)> {};

template <class T>
struct optional_value {};
template <class T>
struct optional_value<std::optional<T>> {
  using type = T;
};

template <class F>
struct function_stage_types {
  using sig = call_signature<F>;
  static_assert(sig::known,
                "dflash::stage<\"name\">(f): f needs exactly one call signature (a generic lambda with auto "
                "parameters has none): write the parameter type");
  static constexpr std::size_t arity = std::tuple_size_v<typename sig::args>;
  static_assert(arity <= 1, "dflash::stage<\"name\">(f): f takes the item (one argument), or nothing for a source");
  static constexpr bool source = arity == 0;
  static_assert(!source || requires { typename optional_value<typename sig::result>::type; },
                "dflash::stage<\"name\">(f): a source (no arguments) returns std::optional<T>; an empty optional "
                "ends the stream");
  static auto input() {
    if constexpr (source) return std::type_identity<void>{};
    else return std::type_identity<std::remove_cvref_t<std::tuple_element_t<0, typename sig::args>>>{};
  }
  static auto output() {
    if constexpr (source) return std::type_identity<typename optional_value<typename sig::result>::type>{};
    else return std::type_identity<typename sig::result>{};
  }
  using input_type = typename decltype(input())::type;
  using output_type = typename decltype(output())::type;
};
}  // namespace detail

/// A stage made from a function object; see the header comment.
template <fixed_string Name, class F>
class function_stage {
  using types = detail::function_stage_types<F>;

 public:
  static constexpr auto name = Name;
  using input_type = typename types::input_type;
  using output_type = typename types::output_type;

  explicit function_stage(F f) : f_(std::move(f)) {}

  decltype(auto) operator()()
    requires types::source
  {
    return f_();
  }
  output_type operator()(std::conditional_t<types::source, char, input_type>&& x)  // (char: never called)
    requires(!types::source)
  {
    return f_(std::move(x));
  }

 private:
  F f_;
};

/// `dflash::stage<"name">(f)`: input and output types deduced from f.
template <fixed_string Name, class F>
[[nodiscard]] function_stage<Name, std::decay_t<F>> stage(F&& f) {
  return function_stage<Name, std::decay_t<F>>(std::forward<F>(f));
}

}  // namespace dflash
