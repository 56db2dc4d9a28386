#pragma once
// AccumulatingProfiler: thread-safe per-key count / total / min / max and a
// log-scale latency histogram, with no lock and no lost update.
//
// Recording threads are spread over `Shards` cache-line-aligned shards
// (striped counters, as in Java's LongAdder): each live thread holds a slot,
// so up to `Shards` concurrent threads never share a shard, and updates are relaxed atomic RMWs on that shard, so two threads
// collide only when they share a shard, and even then nothing is lost.
// snapshot() merges the shards; take() merges and resets with atomic
// exchanges, so every add() lands in exactly one report.

#include <array>
#include <bit>
#include <functional>
#include <thread>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>

#include "dflash/profile/clock.hpp"
#include "dflash/profile/histogram.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash {

namespace detail {
/// The calling thread's slot: the lowest slot no live thread holds, claimed at
/// the thread's first record and released when it exits. So up to `Shards`
/// concurrent threads never share a shard, however many threads come and go
/// (a round-robin counter would collide once thread ids wrap).
class thread_slot {
 public:
  static unsigned get() noexcept {
    thread_local const thread_slot mine;
    return mine.index_;
  }

 private:
  static constexpr unsigned slots = 64;
  static std::atomic<std::uint64_t>& used() noexcept {
    static std::atomic<std::uint64_t> mask{0};
    return mask;
  }
  thread_slot() noexcept {
    auto& m = used();
    for (auto cur = m.load(std::memory_order_relaxed); ~cur != 0;) {
      const unsigned i = static_cast<unsigned>(std::countr_one(cur));
      if (m.compare_exchange_weak(cur, cur | (std::uint64_t{1} << i), std::memory_order_relaxed)) {
        index_ = i;
        owned_ = true;
        return;
      }
    }
    // More than 64 live recording threads: share slots (still exact, atomics).
    index_ = static_cast<unsigned>(std::hash<std::thread::id>{}(std::this_thread::get_id()) % slots);
  }
  ~thread_slot() {
    if (owned_) used().fetch_and(~(std::uint64_t{1} << index_), std::memory_order_relaxed);
  }
  unsigned index_ = 0;
  bool owned_ = false;
};
}  // namespace detail

template <class Keys, ProfilerClock Clock = std::chrono::steady_clock, std::size_t Shards = 8>
  requires(ClosedKeySet<Keys> && Shards > 0)
class AccumulatingProfiler {
 public:
  using keys = Keys;
  using clock = Clock;
  using duration = typename Clock::duration;
  using time_point = typename Clock::time_point;
  static constexpr bool enabled = true;
  static constexpr std::size_t shard_count = Shards;

  using token = time_point;

  /// RAII timer returned by scope(): records on destruction.
  template <std::size_t I>
  class scope_type {
   public:
    explicit scope_type(const AccumulatingProfiler& p) noexcept : p_(&p), start_(Clock::now()) {}
    scope_type(const scope_type&) = delete;
    scope_type& operator=(const scope_type&) = delete;
    ~scope_type() { p_->record(I, to_ns(Clock::now() - start_)); }

   private:
    const AccumulatingProfiler* p_;
    time_point start_;
  };

  AccumulatingProfiler() : cells_(std::make_unique<shard[]>(Shards)), epoch_(Clock::now().time_since_epoch().count()) {
    reset_all();
  }
  AccumulatingProfiler(const AccumulatingProfiler&) = delete;
  AccumulatingProfiler& operator=(const AccumulatingProfiler&) = delete;

  template <Key K>
  token begin(K) const noexcept {
    check_key<K>();
    return Clock::now();
  }
  template <Key K>
  void end(K, token start) const noexcept {
    check_key<K>();
    record(Keys::index_of(K::name()), to_ns(Clock::now() - start));
  }
  template <Key K>
  [[nodiscard]] scope_type<Keys::index_of(K::name())> scope(K) const noexcept {
    check_key<K>();
    return scope_type<Keys::index_of(K::name())>(*this);
  }
  /// Record a duration measured elsewhere (e.g. GPU time). Negative → throws.
  template <Key K, class Rep, class Period>
  void add(K, std::chrono::duration<Rep, Period> d) const {
    check_key<K>();
    record(Keys::index_of(K::name()), detail::checked_add_ns("dflash::AccumulatingProfiler", K::name(), d));
  }

  /// Merged view of every shard. Exact when no thread is recording.
  profile_snapshot snapshot() const { return collect(false); }
  /// snapshot() and reset in one pass: no update is lost between the two.
  profile_snapshot take() { return collect(true); }
  void clear() noexcept {
    reset_all();
    epoch_.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }

  std::string summary(report_format f = report_format::table) const { return format_report(snapshot(), f); }

  /// Records of one key in the current window (sums its histogram; for tests and progress).
  template <Key K>
  std::uint64_t count(K) const noexcept {
    check_key<K>();
    std::uint64_t c = 0;
    for (std::size_t s = 0; s < Shards; ++s)
      for (const auto& b : cells_[s].k[Keys::index_of(K::name())].buckets) c += b.load(std::memory_order_relaxed);
    return c;
  }

 private:
  // The count is the sum of the histogram's buckets: one RMW fewer per record.
  struct cell {
    std::atomic<std::uint64_t> total, min, max;
    std::array<std::atomic<std::uint64_t>, histogram::bucket_count> buckets;
  };
  struct alignas(64) shard {
    std::array<cell, Keys::size> k;
  };

  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<Keys, K>();
  }

  template <class D>
  static std::uint64_t to_ns(D d) noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;  // a steady clock never runs back
  }

  void record(std::size_t i, std::uint64_t ns) const noexcept {
    cell& c = cells_[detail::thread_slot::get() % Shards].k[i];
    c.total.fetch_add(ns, std::memory_order_relaxed);
    for (auto m = c.min.load(std::memory_order_relaxed); ns < m;)
      if (c.min.compare_exchange_weak(m, ns, std::memory_order_relaxed)) break;
    for (auto m = c.max.load(std::memory_order_relaxed); ns > m;)
      if (c.max.compare_exchange_weak(m, ns, std::memory_order_relaxed)) break;
    c.buckets[histogram::bucket_of(ns)].fetch_add(1, std::memory_order_relaxed);
  }

  void reset_all() noexcept {
    for (std::size_t s = 0; s < Shards; ++s)
      for (cell& c : cells_[s].k) {
        c.total.store(0, std::memory_order_relaxed);
        c.min.store(UINT64_MAX, std::memory_order_relaxed);
        c.max.store(0, std::memory_order_relaxed);
        for (auto& b : c.buckets) b.store(0, std::memory_order_relaxed);
      }
  }

  profile_snapshot collect(bool reset) const {
    const auto now = Clock::now().time_since_epoch().count();
    const auto then = reset ? epoch_.exchange(now, std::memory_order_relaxed) : epoch_.load(std::memory_order_relaxed);
    profile_snapshot out;
    out.window_ns = to_ns(duration{now - then});
    out.keys.resize(Keys::size);
    auto grab = [reset](std::atomic<std::uint64_t>& a, std::uint64_t fresh) {
      return reset ? a.exchange(fresh, std::memory_order_relaxed) : a.load(std::memory_order_relaxed);
    };
    for (std::size_t i = 0; i < Keys::size; ++i) {
      key_stats& ks = out.keys[i];
      ks.name = std::string(Keys::names[i]);
      std::uint64_t mn = UINT64_MAX;
      for (std::size_t s = 0; s < Shards; ++s) {
        cell& c = cells_[s].k[i];
        ks.total_ns += grab(c.total, 0);
        mn = std::min(mn, grab(c.min, UINT64_MAX));
        ks.max_ns = std::max(ks.max_ns, grab(c.max, 0));
        for (std::size_t b = 0; b < histogram::bucket_count; ++b) ks.buckets[b] += grab(c.buckets[b], 0);
      }
      for (const auto b : ks.buckets) ks.count += b;
      ks.min_ns = ks.count ? mn : 0;
    }
    return out;
  }

  // Shared, mutable-through-const storage: recording is not a logical
  // mutation of the stages that hold a const profiler_ref.
  std::unique_ptr<shard[]> cells_;
  mutable std::atomic<typename duration::rep> epoch_;
};

}  // namespace dflash
