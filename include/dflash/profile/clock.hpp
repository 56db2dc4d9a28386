#pragma once
// Clock policies for the accumulating profiler. Any std::chrono-style clock
// with a static noexcept now() works (steady_clock is the default); dflash adds
// a TSC clock (cheaper reads on x86) and a manual clock for deterministic tests.

#include <atomic>
#include <concepts>
#include <cstdint>
#include <thread>

#include "dflash/detail/std_chrono.hpp"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// __builtin_ia32_rdtsc rather than <x86intrin.h>: no intrinsics header in users' code.
#define DFLASH_HAS_TSC 1
#else
#define DFLASH_HAS_TSC 0
#endif

namespace dflash {

template <class C>
concept ProfilerClock = requires {
  typename C::duration;
  typename C::time_point;
  { C::now() } noexcept -> std::same_as<typename C::time_point>;
  { C::now() - C::now() } -> std::convertible_to<typename C::duration>;
};

/// A ProfilerClock that also hands out its raw counter. A profiler that needs
/// only a range's length (AccumulatingProfiler) reads ticks() at both ends and
/// converts the difference once, instead of converting two time points: a
/// multiply less per zone, a few percent of a TSC zone.
template <class C>
concept TickClock = ProfilerClock<C> && requires(std::int64_t d) {
  { C::ticks() } noexcept -> std::same_as<std::uint64_t>;
  { C::ticks_to_ns(d) } noexcept -> std::same_as<std::uint64_t>;
};

namespace detail {
/// The std::chrono clock members of a steady nanosecond clock C.
template <class C>
struct steady_ns_clock {
  using rep = std::int64_t;
  using period = std::nano;
  using duration = std::chrono::duration<rep, period>;
  using time_point = std::chrono::time_point<C, duration>;  // duration given: C is incomplete here
  static constexpr bool is_steady = true;
};
}  // namespace detail

/// A clock that only moves when told to. Global (static) so that the profiler
/// can stay a plain type; tests set it, advance it, and never race on it.
struct manual_clock : detail::steady_ns_clock<manual_clock> {
  static time_point now() noexcept { return time_point{duration{ticks().load(std::memory_order_relaxed)}}; }
  static void advance(duration d) noexcept { ticks().fetch_add(d.count(), std::memory_order_relaxed); }
  static void set(time_point t) noexcept { ticks().store(t.time_since_epoch().count(), std::memory_order_relaxed); }

 private:
  static std::atomic<rep>& ticks() noexcept {
    static std::atomic<rep> t{0};
    return t;
  }
};

#if DFLASH_HAS_TSC
namespace detail {
// ns = (tsc - base) * mult >> 32, calibrated once against steady_clock.
struct tsc_calibration {
  std::uint64_t base;
  std::uint64_t mult;

  static tsc_calibration measure() noexcept {
    using sc = std::chrono::steady_clock;
    const auto t0 = sc::now();
    const std::uint64_t c0 = __builtin_ia32_rdtsc();
    while (sc::now() - t0 < std::chrono::milliseconds(5)) {
    }
    const auto t1 = sc::now();
    const std::uint64_t c1 = __builtin_ia32_rdtsc();
    const double ns = std::chrono::duration<double, std::nano>(t1 - t0).count();
    const double ns_per_tick = ns / static_cast<double>(c1 - c0);
    return {c0, static_cast<std::uint64_t>(ns_per_tick * 4294967296.0)};
  }
};

template <class = void>
struct tsc_state {
  // A static member of a class template is initialised only in programs that
  // use the TSC clock, so merely including this header costs no start-up time.
  static inline const tsc_calibration calibration = tsc_calibration::measure();
};
}  // namespace detail

/// Reads the invariant TSC (rdtsc) and converts to nanoseconds with one
/// multiply. Cheaper than steady_clock's vDSO call; not serialising, which is
/// what a profiler of ≥100 ns regions wants.
struct tsc_clock : detail::steady_ns_clock<tsc_clock> {
  static time_point now() noexcept {
    return time_point{duration{static_cast<rep>(to_ns(ticks() - detail::tsc_state<>::calibration.base))}};
  }
  /// The raw counter (TickClock): only differences of two reads mean anything.
  static std::uint64_t ticks() noexcept { return __builtin_ia32_rdtsc(); }
  /// A difference of two ticks() in nanoseconds. Negative (the thread moved to
  /// a core whose counter is a little behind) reads as 0, as a range between
  /// two now() does in a profiler.
  static std::uint64_t ticks_to_ns(std::int64_t d) noexcept { return d > 0 ? to_ns(static_cast<std::uint64_t>(d)) : 0; }

 private:
  static std::uint64_t to_ns(std::uint64_t t) noexcept {
    __extension__ using u128 = unsigned __int128;  // 64x64→128 multiply, no overflow
    return static_cast<std::uint64_t>((static_cast<u128>(t) * detail::tsc_state<>::calibration.mult) >> 32);
  }
};
#else
using tsc_clock = std::chrono::steady_clock;  // no TSC on this architecture
#endif

static_assert(ProfilerClock<std::chrono::steady_clock>);
static_assert(ProfilerClock<manual_clock>);
static_assert(ProfilerClock<tsc_clock>);
#if DFLASH_HAS_TSC
static_assert(TickClock<tsc_clock>);
#endif
static_assert(!TickClock<std::chrono::steady_clock>);

}  // namespace dflash
