#pragma once
// The ProfilerPolicy concept: what a pipeline stage may call on its profiler.
//
// A policy P provides, for every key k in P::keys:
//   P::enabled            static constexpr bool; false means "compiles to nothing"
//   P::duration           what add() takes (a std::chrono duration)
//   p.begin(k) -> token   start a measurement; p.end(k, token) finishes it
//   p.scope(k)            RAII form of begin/end
//   p.add(k, d)           record an externally measured duration
// Members are const: a profiler is shared by many threads and stages through
// profiler_ref, and recording is not a logical mutation of the stage.

#include <chrono>
#include <concepts>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dflash/profile/key.hpp"

namespace dflash {

namespace detail {
template <bool>
struct constant_bool {};
}  // namespace detail

template <class P>
concept ProfilerPolicy =
    requires {
      typename P::keys;
      typename P::duration;
      { P::enabled } -> std::convertible_to<bool>;
      typename detail::constant_bool<P::enabled>;  // must be a constant expression
    } &&
    KeySet<typename P::keys> &&
    requires(const P& p, typename P::keys::probe k, typename P::duration d) {
      { p.begin(k) } noexcept;
      p.end(k, p.begin(k));
      p.scope(k);
      p.add(k, d);
    };

namespace detail {
/// What add(k, d) records, in ns; a negative duration is the caller's bug, and
/// is reported (naming the policy, the key and the value), never clamped.
template <class Rep, class Period>
std::uint64_t checked_add_ns(std::string_view who, std::string_view key, std::chrono::duration<Rep, Period> d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  if (ns < 0)
    throw std::invalid_argument(std::string(who) + "::add: negative duration for key '" + std::string(key) +
                                "' (got " + std::to_string(ns) + " ns)");
  return static_cast<std::uint64_t>(ns);
}
}  // namespace detail

/// A policy whose every member is a no-op (empty, stateless): NullProfiler,
/// Composite<>, ... Stages hold such policies with zero size.
template <class P>
concept NullPolicy = ProfilerPolicy<P> && !P::enabled && std::is_empty_v<P>;

/// How a stage holds its (usually shared) profiler. For an empty policy the
/// handle is itself empty — a pointer would cost 8 bytes per stage — and
/// `[[no_unique_address]] profiler_ref<P>` adds nothing to the stage.
template <ProfilerPolicy P>
class profiler_ref {
 public:
  constexpr profiler_ref() noexcept = default;
  constexpr profiler_ref(const P& p) noexcept : p_(&p) {}

  constexpr const P& get() const noexcept { return *p_; }
  constexpr const P* operator->() const noexcept { return p_; }
  constexpr explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  const P* p_ = nullptr;
};

template <ProfilerPolicy P>
  requires std::is_empty_v<P>
class profiler_ref<P> {
 public:
  constexpr profiler_ref() noexcept = default;
  constexpr profiler_ref(const P&) noexcept {}

  constexpr const P& get() const noexcept { return instance_; }
  constexpr const P* operator->() const noexcept { return &instance_; }
  constexpr explicit operator bool() const noexcept { return true; }

 private:
  static constexpr P instance_{};
};

/// Time `f()` under key `k`; returns what f returns.
template <ProfilerPolicy P, Key K, class F>
constexpr decltype(auto) timed(const P& p, K k, F&& f) {
  auto scope = p.scope(k);
  return std::forward<F>(f)();
}

}  // namespace dflash
