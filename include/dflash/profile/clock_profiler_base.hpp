#pragma once
// clock_profiler_base: the ProfilerPolicy timing members (begin / end / end_at /
// scope / add) of every policy that times ranges with a host clock, written once.
//
// A policy derives from clock_profiler_base<itself, Keys, Clock> and says what a
// finished range means to it, privately (befriending the base):
//
//   static constexpr std::string_view policy_name;   // names the policy in add()'s error
//   void on_range(std::size_t key, time_point start, time_point stop) const noexcept;
//   void on_added(std::size_t key, std::uint64_t ns) const noexcept;  // a duration measured elsewhere
//
// A policy for which a scope's length is all that counts may also say so:
//
//   void on_length(std::size_t key, std::uint64_t ns) const noexcept;
//
// and with a TickClock its scopes then read the raw counter at both ends and
// convert once (a multiply less per zone than two now()).
//
// The key index is a compile-time constant at every call, and every member is
// inline, so a zone costs what the policy's own on_range costs: the base adds
// no call, no pointer and no state (it is empty).

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "dflash/profile/clock.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"

namespace dflash::detail {

template <class Derived, class Keys, ProfilerClock Clock>
class clock_profiler_base {
 public:
  using keys = Keys;
  using clock = Clock;
  using duration = typename Clock::duration;
  using time_point = typename Clock::time_point;
  using token = time_point;
  static constexpr bool enabled = true;

  /// RAII timer returned by scope(): the range ends when it is destroyed.
  template <std::size_t I>
  class scope_type {
   public:
    explicit scope_type(const Derived& p) noexcept : p_(&p), start_(Clock::now()) {}
    scope_type(const scope_type&) = delete;
    scope_type& operator=(const scope_type&) = delete;
    ~scope_type() { p_->on_range(I, start_, Clock::now()); }

   private:
    const Derived* p_;
    time_point start_;
  };

  /// scope() of a policy that needs only the length, with a TickClock: the raw counter at both ends.
  template <std::size_t I>
  class length_scope_type {
   public:
    explicit length_scope_type(const Derived& p) noexcept : p_(&p), start_(Clock::ticks()) {}
    length_scope_type(const length_scope_type&) = delete;
    length_scope_type& operator=(const length_scope_type&) = delete;
    ~length_scope_type() { p_->on_length(I, Clock::ticks_to_ns(static_cast<std::int64_t>(Clock::ticks() - start_))); }

   private:
    const Derived* p_;
    std::uint64_t start_;
  };

  template <Key K>
  token begin(K) const noexcept {
    check_key<K>();
    return Clock::now();
  }
  template <Key K>
  void end(K, token start) const noexcept {
    check_key<K>();
    self().on_range(Keys::index_of(K::name()), start, Clock::now());
  }
  /// end() with the stop time read by the caller (Composite reads the clock once for all members).
  template <Key K>
  void end_at(K, token start, time_point stop) const noexcept {
    check_key<K>();
    self().on_range(Keys::index_of(K::name()), start, stop);
  }
  template <Key K>
  [[nodiscard]] auto scope(K) const noexcept {
    check_key<K>();
    constexpr std::size_t i = Keys::index_of(K::name());
    if constexpr (length_only()) return length_scope_type<i>(self());
    else return scope_type<i>(self());
  }
  /// Record a duration measured elsewhere (e.g. GPU time). Negative → std::invalid_argument.
  template <Key K, class Rep, class Period>
  void add(K, std::chrono::duration<Rep, Period> d) const {
    check_key<K>();
    self().on_added(Keys::index_of(K::name()), checked_add_ns(Derived::policy_name, K::name(), d));
  }

 protected:
  clock_profiler_base() = default;
  // Asked inside scope(), where Derived is complete.
  static constexpr bool length_only() noexcept {
    if constexpr (TickClock<Clock>)
      return requires(const Derived& d, std::size_t key, std::uint64_t ns) { d.on_length(key, ns); };
    else return false;
  }

  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<Keys, K>();
  }

 private:
  [[nodiscard]] const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

}  // namespace dflash::detail
