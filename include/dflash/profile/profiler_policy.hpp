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

#include <concepts>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "dflash/detail/format.hpp"
#include "dflash/detail/std_chrono.hpp"
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
/// The error of a bad add(k, d): one function for every policy, key and duration type.
[[noreturn]] inline void throw_bad_add(std::string_view who, std::string_view key, const char* problem,
                                       const long double* ns = nullptr, const char* more = "") {
  const int wl = static_cast<int>(who.size()), kl = static_cast<int>(key.size());
  if (ns == nullptr) throw_invalid_argument("%.*s::add: %s for key '%.*s'", wl, who.data(), problem, kl, key.data());
  throw_invalid_argument("%.*s::add: %s for key '%.*s' (got %.6Lg ns)%s", wl, who.data(), problem, kl, key.data(),
                         *ns, more);
}

/// What add(k, d) records, in ns. The range is checked *before* converting (a
/// conversion to int64 ns would overflow for ~292 years and more); negative,
/// too large, NaN and infinite durations are the caller's bug and are reported
/// naming the policy, the key and the value, never clamped.
template <class Rep, class Period>
std::uint64_t checked_add_ns(std::string_view who, std::string_view key, std::chrono::duration<Rep, Period> d) {
  // long double holds every int64 exactly (x86: 64-bit mantissa), and its
  // range is far beyond any Rep/Period product.
  const long double ns = std::chrono::duration<long double, std::nano>(d).count();
  if (ns != ns) throw_bad_add(who, key, "duration is NaN");
  if (ns > std::numeric_limits<long double>::max() || ns < -std::numeric_limits<long double>::max())
    throw_bad_add(who, key, "duration is infinite");
  if (ns < 0) throw_bad_add(who, key, "negative duration", &ns);
  if (ns > static_cast<long double>(std::numeric_limits<std::int64_t>::max()))
    throw_bad_add(who, key, "duration too large", &ns, "; at most 2^63-1 ns (about 292 years)");
  if constexpr (std::is_floating_point_v<Rep>) return static_cast<std::uint64_t>(ns);  // in range: truncates
  else return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(d).count());
}
}  // namespace detail

/// A policy whose every member is a no-op (empty, stateless): NullProfiler,
/// Composite<>, ... Stages hold such policies with zero size.
template <class P>
concept NullPolicy = ProfilerPolicy<P> && !P::enabled && std::is_empty_v<P>;

namespace detail {
/// What `ref->f(k)` reaches through a profiler_ref that names the stage's
/// keys: every key is checked against them at compile time, whatever the
/// policy, so a misspelt key fails the NullProfiler build too. A temporary
/// that forwards inline: no state beyond the policy's pointer, no instruction.
template <class P, class Keys>
class declared_keys_calls {
 public:
  constexpr explicit declared_keys_calls(const P* p) noexcept : p_(p) {}
  constexpr const declared_keys_calls* operator->() const noexcept { return this; }

  template <Key K>
  constexpr auto begin(K k) const noexcept {
    require_key<Keys, K, declared_key_check>();
    return p_->begin(k);
  }
  template <Key K, class Token>
  constexpr void end(K k, Token&& t) const {
    require_key<Keys, K, declared_key_check>();
    p_->end(k, std::forward<Token>(t));
  }
  template <Key K>
  [[nodiscard]] constexpr auto scope(K k) const {
    require_key<Keys, K, declared_key_check>();
    return p_->scope(k);
  }
  template <Key K, class D>
  constexpr void add(K k, D d) const {
    require_key<Keys, K, declared_key_check>();
    p_->add(k, d);
  }

 private:
  const P* p_;
};
}  // namespace detail

/// How a stage holds its (usually shared) profiler. For an empty policy the
/// handle is itself empty — a pointer would cost 8 bytes per stage — and
/// `[[no_unique_address]] profiler_ref<P>` adds nothing to the stage.
///
/// `profiler_ref<P, keys>` also names the keys the stage records (its
/// `using keys = key_set<...>`): every key given through `ref->` is checked
/// against them at compile time in every build, NullProfiler's included,
/// where the policy alone (NullProfiler takes any key) would let a misspelt
/// key through until the profiled build. `get()` is the unchecked policy.
template <ProfilerPolicy P, KeySet Keys = typename P::keys>
class profiler_ref {
  static constexpr bool checks_keys = !std::is_same_v<Keys, typename P::keys>;

 public:
  using keys = Keys;
  constexpr profiler_ref() noexcept = default;
  constexpr profiler_ref(const P& p) noexcept : p_(&p) {}
  /// From a ref with other declared keys (a stage's handed to an op).
  template <KeySet K2>
    requires(!std::is_same_v<K2, Keys>)
  constexpr profiler_ref(const profiler_ref<P, K2>& r) noexcept : p_(r ? &r.get() : nullptr) {}

  constexpr const P& get() const noexcept { return *p_; }
  constexpr auto operator->() const noexcept {
    if constexpr (checks_keys) return detail::declared_keys_calls<P, Keys>(p_);
    else return p_;
  }
  constexpr explicit operator bool() const noexcept { return p_ != nullptr; }

 private:
  const P* p_ = nullptr;
};

template <ProfilerPolicy P, KeySet Keys>
  requires std::is_empty_v<P>
class profiler_ref<P, Keys> {
  static constexpr bool checks_keys = !std::is_same_v<Keys, typename P::keys>;

 public:
  using keys = Keys;
  constexpr profiler_ref() noexcept = default;
  constexpr profiler_ref(const P&) noexcept {}
  template <KeySet K2>
    requires(!std::is_same_v<K2, Keys>)
  constexpr profiler_ref(const profiler_ref<P, K2>&) noexcept {}

  constexpr const P& get() const noexcept { return instance_; }
  constexpr auto operator->() const noexcept {
    if constexpr (checks_keys) return detail::declared_keys_calls<P, Keys>(&instance_);
    else return &instance_;
  }
  constexpr explicit operator bool() const noexcept { return true; }

 private:
  static constexpr P instance_{};
};

template <ProfilerPolicy P>
profiler_ref(const P&) -> profiler_ref<P>;

/// Name the calling thread for policies that label threads (TraceProfiler's
/// track, e.g. "target_forward#2"; a Composite forwards to such members); a
/// no-op for every other policy. Call once per thread, off the hot path.
template <ProfilerPolicy P>
void name_this_thread(const P& p, std::string_view name) {
  if constexpr (requires { p.name_this_thread(name); }) p.name_this_thread(name);
}

/// Where a stage's work range sits in one item's path through a pipeline
/// (a policy's optional flow_step(k, seq, phase), e.g. TraceProfiler's arrows).
enum class flow_phase { start, step, end };

/// Time `f()` under key `k`; returns what f returns.
template <ProfilerPolicy P, Key K, class F>
constexpr decltype(auto) timed(const P& p, K k, F&& f) {
  auto scope = p.scope(k);
  return std::forward<F>(f)();
}

}  // namespace dflash
