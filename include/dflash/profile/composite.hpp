#pragma once
// Composite<P...>: one policy that forwards every call to several policies,
// e.g. accumulate stats and write a trace from the same scopes:
//
//   AccumulatingProfiler<keys> stats;  TraceProfiler<keys> trace;
//   Composite<AccumulatingProfiler<keys>, TraceProfiler<keys>> both{stats, trace};
//   auto t = both.scope("forward"_key);   // both record "forward"
//
// Members are held as profiler_ref<P> in a Boost.Hana basic_tuple: a pointer to each
// stateful member (the Composite does not own them; they must outlive it) and
// nothing at all for empty ones. Hence Composite<> and Composite<NullProfiler>
// are empty, disabled policies whose calls compile to nothing, like
// NullProfiler itself (proved by scripts/zero_cost_check.sh).
//
// Definitions:
//  * enabled — true iff any member is enabled.
//  * keys    — a key is accepted iff every *enabled* member accepts it: the
//              intersection of their key sets, in the first set's order
//              (any_key when every enabled member takes any key, or none is
//              enabled). Disabled members are never called (they do nothing
//              by definition), so they cannot restrict the keys.
//  * order   — begin/scope-start run members first to last, end runs them last
//              to first, so ranges nest (NVTX push/pop stays LIFO) and member 0
//              measures the widest interval.
//  * add     — forwarded to each member in order; if one throws (e.g. a
//              negative duration), later members do not see that call.
//  * clear   — not forwarded: members are shared and owned elsewhere; clear
//              them where they are owned.

#include <chrono>
#include <cstddef>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>

#include "dflash/profile/key.hpp"
#include "dflash/profile/null_profiler.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash {

namespace detail {

// Key lists are handled as type lists of key_t<...> types: nvcc 13 cannot
// match partial specialisations over fixed_string packs, but type packs are fine.
template <class... K>
struct key_list {
  template <class... More>
  using append = key_list<K..., More...>;
  static constexpr std::size_t size = sizeof...(K);
  using as_key_set = key_set<K::value...>;
};
template <fixed_string... N>
using key_list_of = key_list<key_t<N>...>;

template <class... L>
struct key_list_cat {
  using type = key_list<>;
};
template <class L>
struct key_list_cat<L> {
  using type = L;
};
template <class A, class... B, class... Rest>
struct key_list_cat<A, key_list<B...>, Rest...> : key_list_cat<typename A::template append<B...>, Rest...> {};

/// Meet of an accumulated key list (any_key or key_list) with one member's keys.
template <class Acc, class S>
struct keys_meet {  // Acc = key_list<A...>, S closed: keep the A that S contains
  template <class... A>
  static auto filter(key_list<A...>)
      -> typename key_list_cat<std::conditional_t<S::contains(A::name()), key_list<A>, key_list<>>...>::type;
  using type = decltype(filter(Acc{}));
};
template <class Acc>
struct keys_meet<Acc, any_key> {
  using type = Acc;
};
template <class S>
struct keys_meet<any_key, S> {
  using type = typename S::template apply<key_list_of>;
};
template <>
struct keys_meet<any_key, any_key> {
  using type = any_key;
};

template <class Acc, class... P>
struct composite_keys_fold {
  using type = Acc;
};
template <class Acc, class P, class... Rest>
struct composite_keys_fold<Acc, P, Rest...>
    : composite_keys_fold<std::conditional_t<P::enabled, typename keys_meet<Acc, typename P::keys>::type, Acc>,
                          Rest...> {};

template <class L>
struct as_key_set {
  static_assert(L::size > 0,
                "dflash::Composite: the enabled members' key sets have no key in common, so no key could be "
                "recorded by all of them");
  using type = typename L::as_key_set;
};
template <>
struct as_key_set<any_key> {
  using type = any_key;
};

template <class... P>
using composite_keys_t = typename as_key_set<typename composite_keys_fold<any_key, P...>::type>::type;

/// Token slot of a member that is skipped (disabled).
struct skipped_token {};

template <bool Enabled, class P, class K>
struct member_token {
  using type = skipped_token;
};
template <class P, class K>
struct member_token<true, P, K> {
  using type = decltype(std::declval<const P&>().begin(K{}));
};
template <class P, class K>
using member_token_t = typename member_token<P::enabled, P, K>::type;

template <bool Enabled, class P, class K>
struct member_end_nothrow : std::true_type {};
template <class P, class K>
struct member_end_nothrow<true, P, K>
    : std::bool_constant<noexcept(std::declval<const P&>().end(K{}, std::declval<member_token_t<P, K>>()))> {};

}  // namespace detail

template <ProfilerPolicy... P>
class Composite {
  // basic_tuple, not hana::tuple: only basic_tuple lays out empty members
  // with EBO, which is what makes Composite<NullProfiler> an empty type.
  using refs_t = boost::hana::basic_tuple<profiler_ref<P>...>;
  using members = std::index_sequence_for<P...>;

 public:
  using keys = detail::composite_keys_t<P...>;
  using duration = std::chrono::nanoseconds;
  static constexpr bool enabled = (P::enabled || ...);
  static constexpr std::size_t size = sizeof...(P);

  template <Key K>
  using token_t = boost::hana::basic_tuple<detail::member_token_t<P, K>...>;

 private:
  template <Key K>
  static constexpr bool end_nothrow = (detail::member_end_nothrow<P::enabled, P, K>::value && ...);

  template <Key K>
  class active_scope {
   public:
    explicit constexpr active_scope(const Composite& c) noexcept : c_(&c), t_(c.begin(K{})) {}
    active_scope(const active_scope&) = delete;
    active_scope& operator=(const active_scope&) = delete;
    ~active_scope() { c_->end(K{}, t_); }

   private:
    const Composite* c_;
    token_t<K> t_;
  };

 public:
  /// RAII form of begin/end. For a disabled Composite, NullProfiler's empty scope.
  template <Key K>
  using scope_type = std::conditional_t<enabled, active_scope<K>, NullProfiler::scope_type>;

  /// Only when every member is empty (nothing to refer to).
  constexpr Composite() noexcept
    requires(std::is_empty_v<P> && ...)
  = default;
  /// Refers to the given members; they must outlive the Composite.
  constexpr explicit Composite(const P&... ps) noexcept
    requires(sizeof...(P) > 0)
      : refs_(profiler_ref<P>(ps)...) {}

  template <Key K>
  constexpr token_t<K> begin(K k) const noexcept {
    check_key<K>();
    return begin_all(k, members{});
  }
  template <Key K>
  constexpr void end(K k, const token_t<K>& t) const noexcept(end_nothrow<K>) {
    check_key<K>();
    end_all(k, t, members{});
  }
  template <Key K>
  [[nodiscard]] constexpr scope_type<K> scope(K) const noexcept {
    check_key<K>();
    if constexpr (enabled)
      return scope_type<K>(*this);
    else
      return {};
  }
  template <Key K, class Rep, class Period>
  constexpr void add(K k, std::chrono::duration<Rep, Period> d) const noexcept(!enabled) {
    check_key<K>();
    add_all(k, d, members{});
  }

  /// The I-th member.
  template <std::size_t I>
  constexpr const auto& get() const noexcept {
    return boost::hana::at_c<I>(refs_).get();
  }

 private:
  template <Key K>
  static constexpr void check_key() noexcept {
    static_assert(keys::contains(K::name()),
                  "dflash: this key is not accepted by every enabled member of the Composite — misspelt, or "
                  "missing from one member's key_set (the key's name is the key_t<...> argument above)");
  }

  template <class K, std::size_t... I>
  constexpr token_t<K> begin_all(K k, std::index_sequence<I...>) const noexcept {
    return token_t<K>{begin_one<I>(k)...};  // braced: members begin first to last
  }
  template <std::size_t I, class K>
  constexpr auto begin_one(K k) const noexcept {
    using M = std::tuple_element_t<I, std::tuple<P...>>;
    if constexpr (M::enabled)
      return boost::hana::at_c<I>(refs_)->begin(k);
    else
      return detail::skipped_token{};
  }

  template <class K, std::size_t... I>
  constexpr void end_all(K k, const token_t<K>& t, std::index_sequence<I...>) const noexcept(end_nothrow<K>) {
    (end_one<sizeof...(P) - 1 - I>(k, t), ...);  // last to first
  }
  template <std::size_t I, class K>
  constexpr void end_one(K k, const token_t<K>& t) const noexcept(end_nothrow<K>) {
    using M = std::tuple_element_t<I, std::tuple<P...>>;
    if constexpr (M::enabled) boost::hana::at_c<I>(refs_)->end(k, boost::hana::at_c<I>(t));
  }

  template <class K, class D, std::size_t... I>
  constexpr void add_all(K k, D d, std::index_sequence<I...>) const {
    (add_one<I>(k, d), ...);
  }
  template <std::size_t I, class K, class D>
  constexpr void add_one(K k, D d) const {
    using M = std::tuple_element_t<I, std::tuple<P...>>;
    if constexpr (M::enabled) boost::hana::at_c<I>(refs_)->add(k, d);
  }

  [[no_unique_address]] refs_t refs_;
};

static_assert(NullPolicy<Composite<>>);
static_assert(NullPolicy<Composite<NullProfiler>>);
static_assert(NullPolicy<Composite<NullProfiler, Composite<>>>);

}  // namespace dflash
