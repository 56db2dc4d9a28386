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

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "dflash/detail/std_chrono.hpp"
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

  /// Whether scope() reads the clock's raw counter (a TickClock, and a policy
  /// that needs only a range's length: it defines on_length). Asked where
  /// Derived is complete (inside scope() and what it instantiates).
  static constexpr bool scope_reads_ticks() noexcept {
    if constexpr (TickClock<Clock>)
      return requires(const Derived& d, std::size_t key, std::uint64_t ns) { d.on_length(key, ns); };
    else return false;
  }

  /// RAII timer returned by scope(): the range ends when it is destroyed.
  template <std::size_t I>
  class scope_type {
    static constexpr bool ticks = scope_reads_ticks();

   public:
    explicit scope_type(const Derived& p) noexcept : p_(&p), start_(read()) {}
    scope_type(const scope_type&) = delete;
    scope_type& operator=(const scope_type&) = delete;
    ~scope_type() {
      if constexpr (ticks) p_->on_length(I, Clock::ticks_to_ns(static_cast<std::int64_t>(Clock::ticks() - start_)));
      else p_->on_range(I, start_, Clock::now());
    }

   private:
    static auto read() noexcept {
      if constexpr (ticks) return Clock::ticks();
      else return Clock::now();
    }
    const Derived* p_;
    std::conditional_t<ticks, std::uint64_t, time_point> start_;
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
  [[nodiscard]] scope_type<Keys::index_of(K::name())> scope(K) const noexcept {
    check_key<K>();
    return scope_type<Keys::index_of(K::name())>(self());
  }
  /// Record a duration measured elsewhere (e.g. GPU time). Negative → std::invalid_argument.
  template <Key K, class Rep, class Period>
  void add(K, std::chrono::duration<Rep, Period> d) const {
    check_key<K>();
    self().on_added(Keys::index_of(K::name()), checked_add_ns(Derived::policy_name, K::name(), d));
  }

 protected:
  clock_profiler_base() = default;

  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<Keys, K>();
  }

 private:
  [[nodiscard]] const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
};

}  // namespace dflash::detail
