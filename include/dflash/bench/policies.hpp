#pragma once
// Compile-time variants of a benchmark (bench/variants.hpp): the profiler
// policies one workload is built for.
//
//   using all = dflash::bench::policies<dflash::NullProfiler,
//                                       dflash::AccumulatingProfiler<keys>,
//                                       dflash::bench::named<"acc+trace", dflash::Composite<acc, trace>>>;
//
// Each entry is a ProfilerPolicy (or named<"label", P> to choose its label);
// the runner makes a fresh instance per run of the workload: a
// default-constructible policy directly, a Composite of default-constructible
// members by making the members too. label_of<T>() is what tables print:
// the label given, the policy's own policy_name without "dflash::", the
// members of a composite joined by '+', else "policy".

#include <cstddef>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include "dflash/profile/fixed_string.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::bench {

template <fixed_string Label, ProfilerPolicy P>
struct named {
  using policy = P;
  static constexpr auto label = Label;
};

namespace detail {
template <class T>
struct variant_policy {
  using type = T;
};
template <fixed_string L, class P>
struct variant_policy<named<L, P>> {
  using type = P;
};
template <class T>
struct is_named : std::false_type {};
template <fixed_string L, class P>
struct is_named<named<L, P>> : std::true_type {};
}  // namespace detail

/// The profiler policy of a policies<...> entry.
template <class T>
using policy_of = typename detail::variant_policy<T>::type;

template <class T>
concept PolicyEntry = ProfilerPolicy<T> || detail::is_named<T>::value;

template <class... Ps>
struct policies {
  static_assert(sizeof...(Ps) > 0, "dflash::bench::policies<...>: list at least one profiler policy to compare");
  static_assert((PolicyEntry<Ps> && ...),
                "dflash::bench::policies<...>: every entry must be a ProfilerPolicy, or dflash::bench::named<\"label\", P>");
  static constexpr std::size_t size = sizeof...(Ps);
};

template <class T>
[[nodiscard]] std::string label_of();

namespace detail {
template <class T>
struct composite_label {  // no policy_name, not a composite of policies
  static std::string get() { return "policy"; }
};
template <template <class...> class C, class... Ms>
  requires(sizeof...(Ms) > 0 && (ProfilerPolicy<Ms> && ...))
struct composite_label<C<Ms...>> {  // a composite: its members' labels
  static std::string get() {
    std::string s;
    ((s += (s.empty() ? "" : "+") + label_of<Ms>()), ...);
    return s;
  }
};
}  // namespace detail

/// The label a table prints for entry T.
template <class T>
[[nodiscard]] std::string label_of() {
  if constexpr (detail::is_named<T>::value) {
    return std::string(T::label.view());
  } else if constexpr (requires { T::policy_name; }) {
    std::string_view n = T::policy_name;
    if (n.substr(0, 8) == "dflash::") n.remove_prefix(8);
    return std::string(n);
  } else {
    return detail::composite_label<T>::get();
  }
}

/// A fresh profiler of policy P for one run of a workload.
template <class P>
class instance {
  static_assert(std::is_default_constructible_v<P>,
                "dflash::bench: the runner makes a fresh profiler per run; this policy cannot be made without "
                "arguments (and is not a composite of policies that can)");

 public:
  [[nodiscard]] const P& get() const noexcept { return p_; }

 private:
  P p_{};
};
template <template <class...> class C, class... Ms>
  requires(!std::is_default_constructible_v<C<Ms...>> && (ProfilerPolicy<Ms> && ...) &&
           std::is_constructible_v<C<Ms...>, const Ms&...>)
class instance<C<Ms...>> {
 public:
  instance() : ms_(), c_(std::apply([](const auto&... m) { return C<Ms...>(m...); }, ms_)) {}
  [[nodiscard]] const C<Ms...>& get() const noexcept { return c_; }

 private:
  std::tuple<Ms...> ms_;  // first: the composite refers to them
  C<Ms...> c_;
};

}  // namespace dflash::bench
