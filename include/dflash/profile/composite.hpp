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
//  * clock   — when every enabled member takes external times from one clock
//              (AccumulatingProfiler and TraceProfiler with the same Clock:
//              token = time_point, end_at()), the clock is read once at begin
//              and once at end for all of them, and they record the same interval.
//  * add     — forwarded to each member in order; if one throws (e.g. a
//              negative duration), later members do not see that call.
//  * clear   — not forwarded: members are shared and owned elsewhere; clear
//              them where they are owned.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

#include <boost/hana/at.hpp>
#include <boost/hana/basic_tuple.hpp>

#include "dflash/detail/std_chrono.hpp"
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

/// A member that takes its times from outside: its token is its clock's
/// time_point and it has end_at(k, start, stop).
template <class P, class K>
concept external_clock_member = requires(const P& p, K k, typename P::clock::time_point t) {
  typename P::clock;
  requires std::same_as<decltype(p.begin(k)), typename P::clock::time_point>;
  p.end_at(k, t, t);
};

/// The clock every enabled member shares, if each takes external times;
/// otherwise a tag (then each member reads its own clock).
struct no_clock_yet {};
struct no_shared_clock {};
template <class K, class Acc, class... P>
struct shared_clock_fold {
  using type = Acc;
};
template <class K, class Acc, class M, class... Rest>
struct shared_clock_fold<K, Acc, M, Rest...> {
  static constexpr auto pick() {
    if constexpr (!M::enabled) return std::type_identity<Acc>{};
    else if constexpr (!external_clock_member<M, K>) return std::type_identity<no_shared_clock>{};
    else if constexpr (std::is_same_v<Acc, no_clock_yet>) return std::type_identity<typename M::clock>{};
    else if constexpr (std::is_same_v<Acc, typename M::clock>) return std::type_identity<Acc>{};
    else return std::type_identity<no_shared_clock>{};
  }
  using type = typename shared_clock_fold<K, typename decltype(pick())::type, Rest...>::type;
};
template <class K, class... P>
using shared_clock_t = typename shared_clock_fold<K, no_clock_yet, P...>::type;
template <class K, class... P>
inline constexpr bool has_shared_clock = !std::is_same_v<shared_clock_t<K, P...>, no_clock_yet> &&
                                         !std::is_same_v<shared_clock_t<K, P...>, no_shared_clock>;

}  // namespace detail

namespace detail {
// `clock`: the first enabled member's that has one, so that a pipeline stamps
// items (pipeline/item.hpp) when some member times with a clock; the ages it
// records are durations, the same to every member.
template <class M>
struct member_clock {
  using clock = typename M::clock;
};
template <class... P>
struct first_member_clock {};
template <class M, class... R>
struct first_member_clock<M, R...>
    : std::conditional_t<M::enabled && requires { typename M::clock; }, member_clock<M>, first_member_clock<R...>> {};
}  // namespace detail

template <ProfilerPolicy... P>
class Composite : public detail::first_member_clock<P...> {
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

  /// A pipeline item's step on work range `k`: forwarded to the members that draw flows (TraceProfiler).
  template <Key K>
  void flow_step(K k, std::uint64_t seq, flow_phase phase) const noexcept {
    check_key<K>();
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (([&] {
         using M = std::tuple_element_t<I, std::tuple<P...>>;
         if constexpr (M::enabled && requires(const M& m) { m.flow_step(k, seq, phase); })
           boost::hana::at_c<I>(refs_)->flow_step(k, seq, phase);
       }()),
       ...);
    }(members{});
  }

  /// Names the calling thread in every member that labels threads (see dflash::name_this_thread).
  void name_this_thread(std::string_view name) const {
    name_all(name, members{});
  }

  /// The I-th member.
  template <std::size_t I>
  constexpr const auto& get() const noexcept {
    return boost::hana::at_c<I>(refs_).get();
  }

 private:
  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<keys, K, detail::composite_key_check>();
  }

  // When every enabled member takes external times from one clock, the clock
  // is read once at begin and once at end for all of them (one clock pair per zone, not one per member).
  template <class K, std::size_t... I>
  constexpr token_t<K> begin_all(K k, std::index_sequence<I...>) const noexcept {
    if constexpr (detail::has_shared_clock<K, P...>) {
      const auto now = detail::shared_clock_t<K, P...>::now();
      return token_t<K>{shared_token<I>(now)...};
    } else {
      return token_t<K>{begin_one<I>(k)...};  // braced: members begin first to last
    }
  }
  template <std::size_t I, class T>
  static constexpr auto shared_token(T now) noexcept {
    using M = std::tuple_element_t<I, std::tuple<P...>>;
    if constexpr (M::enabled)
      return now;
    else
      return detail::skipped_token{};
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
    if constexpr (detail::has_shared_clock<K, P...>) {
      const auto now = detail::shared_clock_t<K, P...>::now();
      (end_at_one<sizeof...(P) - 1 - I>(k, t, now), ...);  // last to first
    } else {
      (end_one<sizeof...(P) - 1 - I>(k, t), ...);  // last to first
    }
  }
  template <std::size_t I, class K, class T>
  constexpr void end_at_one(K k, const token_t<K>& t, T now) const noexcept(end_nothrow<K>) {
    using M = std::tuple_element_t<I, std::tuple<P...>>;
    if constexpr (M::enabled) boost::hana::at_c<I>(refs_)->end_at(k, boost::hana::at_c<I>(t), now);
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

  template <std::size_t... I>
  void name_all(std::string_view name, std::index_sequence<I...>) const {
    (dflash::name_this_thread(boost::hana::at_c<I>(refs_).get(), name), ...);
  }

  [[no_unique_address]] refs_t refs_;
};

static_assert(NullPolicy<Composite<>>);
static_assert(NullPolicy<Composite<NullProfiler>>);
static_assert(NullPolicy<Composite<NullProfiler, Composite<>>>);

}  // namespace dflash
