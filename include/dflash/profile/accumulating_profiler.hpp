#pragma once
// AccumulatingProfiler: thread-safe per-key count / total / min / max and a
// log-scale latency histogram, with no lock, no locked read-modify-write and no
// lost update on the recording path.
//
// Each live recording thread owns a shard (detail::thread_slot hands out
// exclusive slots), so its updates are plain relaxed load + store. Threads
// beyond the `Shards` exclusive shards share one overflow shard under a
// spinlock (correct, slower; raise Shards if that matters).
//
// Windows (take()/clear()) are epochs: every shard has two banks, and a record
// goes to bank[epoch & 1], reset by its owner when it first records in a new
// epoch. take() advances the epoch, then waits until no shard is still inside a
// record that read the old epoch, then reads the old banks — which nobody
// writes any more — so each report holds whole records only (total, count,
// min, max and histogram from the same adds) and each add lands in exactly one
// report. A record brackets its update with an odd/even sequence word; the
// StoreLoad ordering between "record: mark busy, read epoch" and "take: bump
// epoch, read busy marks" comes from an asymmetric barrier (membarrier on
// Linux), so the hot path pays a compiler barrier, not a fence.

#include <algorithm>
#include <array>
#include <bit>
#include <thread>
#include <vector>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <string>
#include <string_view>

#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/asymmetric_barrier.hpp"
#include "dflash/profile/clock.hpp"
#include "dflash/profile/clock_profiler_base.hpp"
#include "dflash/detail/thread_slot.hpp"
#include "dflash/profile/histogram.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash {


template <class Keys, ProfilerClock Clock = std::chrono::steady_clock, std::size_t Shards = 16>
  requires(ClosedKeySet<Keys> && Shards > 0 && Shards <= detail::thread_slot::slots)
class AccumulatingProfiler
    : public detail::clock_profiler_base<AccumulatingProfiler<Keys, Clock, Shards>, Keys, Clock> {
  using base = detail::clock_profiler_base<AccumulatingProfiler, Keys, Clock>;
  friend base;

 public:
  using typename base::duration;
  using typename base::time_point;
  static constexpr std::size_t shard_count = Shards;  ///< exclusive shards (plus one shared overflow shard)
  static constexpr std::string_view policy_name = "dflash::AccumulatingProfiler";  ///< in errors and tables

  AccumulatingProfiler()
      : shards_(std::make_unique<shard[]>(Shards + 1)),
        asymmetric_(detail::asymmetric_barrier_state::fast()),
        window_start_(Clock::now().time_since_epoch().count()) {
    // Register membarrier before any record; records read the answer from here.
    for (std::size_t s = 0; s <= Shards; ++s) {
      reset_bank(shards_[s].banks[0], 0);
      reset_bank(shards_[s].banks[1], no_epoch);
    }
  }
  AccumulatingProfiler(const AccumulatingProfiler&) = delete;
  AccumulatingProfiler& operator=(const AccumulatingProfiler&) = delete;

  /// Merged view of the current window. Exact when no thread is recording;
  /// while threads record, each shard is read consistently (whole records).
  profile_snapshot snapshot() const {
    const std::lock_guard lk(reader_);
    const std::uint64_t e = epoch_.load(std::memory_order_relaxed);
    const auto now = Clock::now().time_since_epoch().count();
    return collect(e, now, window_start_.load(std::memory_order_relaxed), false);
  }
  /// Ends the window and returns it; the next window starts now. Every record
  /// lands in exactly one take(), whole.
  profile_snapshot take() {
    const std::lock_guard lk(reader_);
    const auto [e, now, then] = end_window();
    return collect(e, now, then, true);
  }
  void clear() noexcept {
    const std::lock_guard lk(reader_);
    (void)end_window();
  }

  /// The table of snapshot(). Only what a program asks for is compiled into it: the table here, JSON below.
  std::string summary() const { return format_table(snapshot()); }
  std::string summary(report_format f) const { return format_report(snapshot(), f); }
  std::string summary(const report_options& o) const { return format_report(snapshot(), o); }

  /// Records of one key in the current window (for tests and progress).
  template <Key K>
  std::uint64_t count(K) const noexcept {
    base::template check_key<K>();
    const std::uint64_t e = epoch_.load(std::memory_order_relaxed);
    std::uint64_t c = 0;
    for (std::size_t s = 0; s <= Shards; ++s) {
      const bank& b = shards_[s].banks[e & 1];
      if (b.tag.load(std::memory_order_acquire) != e) continue;
      const cell& k = b.k[Keys::index_of(K::name())];
      c += k.staged_count.load(std::memory_order_relaxed);
      for (const auto& x : k.buckets) c += x.load(std::memory_order_relaxed);
    }
    return c;
  }

 private:
  static constexpr std::uint64_t no_epoch = ~std::uint64_t{0};

  // A record only appends its duration to `staged`; the owner folds a full
  // batch into total / min / max and the histogram at once. A store whose
  // address depends on the duration just measured (the bucket) stalls the next
  // clock read until it resolves — about 9 ns per zone on the benchmark
  // machine, a third of a whole TSC zone; in a batch such stores overlap, and
  // the record itself is two stores. Readers fold the staged values in
  // themselves, so reports stay exact: count = buckets + staged, and so on.
  static constexpr std::uint32_t stage_capacity = 16;
  struct cell {
    std::atomic<std::uint64_t> total, min, max;
    std::atomic<std::uint32_t> staged_count;
    std::array<std::atomic<std::uint64_t>, stage_capacity> staged;
    std::array<std::atomic<std::uint64_t>, histogram::bucket_count> buckets;
  };
  struct bank {
    std::atomic<std::uint64_t> tag;  ///< the epoch this bank holds
    std::array<cell, Keys::size> k;
  };
  struct alignas(64) shard {
    std::atomic<std::uint64_t> seq{0};  ///< odd while its owner is inside record()
    std::atomic<bool> lock{false};      ///< overflow shard only
    bank banks[2];
  };

  void on_range(std::size_t key, time_point start, time_point stop) const noexcept { record(key, to_ns(stop - start)); }
  void on_added(std::size_t key, std::uint64_t ns) const noexcept { record(key, ns); }
  void on_length(std::size_t key, std::uint64_t ns) const noexcept { record(key, ns); }  // scopes on a TickClock

  template <class D>
  static std::uint64_t to_ns(D d) noexcept {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
    return ns > 0 ? static_cast<std::uint64_t>(ns) : 0;  // a steady clock never runs back
  }

  static void reset_bank(bank& b, std::uint64_t tag) noexcept {
    for (cell& c : b.k) {
      c.total.store(0, std::memory_order_relaxed);
      c.min.store(UINT64_MAX, std::memory_order_relaxed);
      c.max.store(0, std::memory_order_relaxed);
      c.staged_count.store(0, std::memory_order_relaxed);
      for (auto& x : c.buckets) x.store(0, std::memory_order_relaxed);
    }
    b.tag.store(tag, std::memory_order_relaxed);
  }

  // Single writer per shard: plain loads and stores, no locked instruction.
  static void update(shard& sh, std::uint64_t e, std::size_t i, std::uint64_t ns) noexcept {
    bank& b = sh.banks[e & 1];
    if (b.tag.load(std::memory_order_relaxed) != e) [[unlikely]]
      reset_bank(b, e);  // first record of this thread in epoch e: the bank's old epoch was taken
    cell& c = b.k[i];
    const std::uint32_t n = c.staged_count.load(std::memory_order_relaxed);
    c.staged[n].store(ns, std::memory_order_relaxed);
    if (n + 1 == stage_capacity) [[unlikely]]
      bin_staged(c);
    else
      c.staged_count.store(n + 1, std::memory_order_relaxed);
  }

  // Owner only, inside its record: folds a full stage into the cell.
  [[gnu::noinline]] static void bin_staged(cell& c) noexcept {
    std::uint64_t total = c.total.load(std::memory_order_relaxed), mn = c.min.load(std::memory_order_relaxed),
                  mx = c.max.load(std::memory_order_relaxed);
    for (const auto& x : c.staged) {
      const std::uint64_t v = x.load(std::memory_order_relaxed);
      total += v;
      mn = std::min(mn, v);
      mx = std::max(mx, v);
      auto& bucket = c.buckets[histogram::bucket_of(v)];
      bucket.store(bucket.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }
    c.total.store(total, std::memory_order_relaxed);
    c.min.store(mn, std::memory_order_relaxed);
    c.max.store(mx, std::memory_order_relaxed);
    c.staged_count.store(0, std::memory_order_relaxed);
  }

  void record(std::size_t i, std::uint64_t ns) const noexcept {
    const unsigned slot = detail::thread_slot::get();
    if (slot < Shards) [[likely]] {
      record_in(shards_[slot], i, ns);
    } else {
      shard& sh = shards_[Shards];
      while (sh.lock.exchange(true, std::memory_order_acquire)) std::this_thread::yield();
      record_in(sh, i, ns);
      sh.lock.store(false, std::memory_order_release);
    }
  }

  void record_in(shard& sh, std::size_t i, std::uint64_t ns) const noexcept {
    const std::uint64_t q = sh.seq.load(std::memory_order_relaxed);
    sh.seq.store(q + 1, std::memory_order_relaxed);  // busy: take() waits for us
    // Pairs with take()'s heavy_barrier: a compiler barrier when membarrier works.
    if (asymmetric_) [[likely]]
      std::atomic_signal_fence(std::memory_order_seq_cst);
    else
      detail::full_fence();
    update(sh, epoch_.load(std::memory_order_relaxed), i, ns);
    sh.seq.store(q + 2, std::memory_order_release);  // done: publishes the update
  }

  struct window {
    std::uint64_t epoch;
    typename duration::rep now, then;
  };
  // Under reader_: advance the epoch and wait until no record of the old one is
  // in flight. Afterwards nobody writes the old banks until the epoch after next.
  window end_window() noexcept {
    const std::uint64_t e = epoch_.load(std::memory_order_relaxed);
    const auto now = Clock::now().time_since_epoch().count();
    const auto then = window_start_.exchange(now, std::memory_order_relaxed);
    epoch_.store(e + 1, std::memory_order_relaxed);
    detail::heavy_barrier();  // a record not yet marked busy now reads e + 1
    for (std::size_t s = 0; s <= Shards; ++s)
      while (shards_[s].seq.load(std::memory_order_acquire) & 1) std::this_thread::yield();
    return {e, now, then};
  }

  // Reads bank[e & 1] of every shard. After end_window() those banks are
  // quiescent; for snapshot() (current epoch) each shard is read under its
  // sequence word and re-read if its owner recorded meanwhile.
  profile_snapshot collect(std::uint64_t e, typename duration::rep now, typename duration::rep then,
                           bool quiescent) const {
    profile_snapshot out;
    out.window_ns = to_ns(duration{now - then});
    out.keys.resize(Keys::size);
    for (std::size_t i = 0; i < Keys::size; ++i) out.keys[i].name = std::string(Keys::names[i]);
    std::vector<key_stats> part(Keys::size);
    for (std::size_t s = 0; s <= Shards; ++s) {
      const shard& sh = shards_[s];
      for (;;) {
        const std::uint64_t q = sh.seq.load(std::memory_order_acquire);
        if (!quiescent && (q & 1)) {
          std::this_thread::yield();
          continue;
        }
        const bool have = read_bank(sh.banks[e & 1], e, part);
        if (quiescent) {
          if (have) merge(out, part);
          break;
        }
        // read_bank's loads are acquire, so this re-read cannot move above them.
        if (sh.seq.load(std::memory_order_relaxed) != q) continue;  // torn: read again
        if (have) merge(out, part);
        break;
      }
    }
    return out;
  }

  static bool read_bank(const bank& b, std::uint64_t e, std::vector<key_stats>& part) {
    if (b.tag.load(std::memory_order_acquire) != e) return false;  // no record in epoch e
    for (std::size_t i = 0; i < Keys::size; ++i) {
      const cell& c = b.k[i];
      key_stats& ks = part[i];
      ks.count = 0;
      // acquire (free on x86): keeps snapshot()'s validating re-read of the
      // sequence word after these loads, as a seqlock reader needs.
      for (std::size_t x = 0; x < histogram::bucket_count; ++x) {
        ks.buckets[x] = c.buckets[x].load(std::memory_order_acquire);
        ks.count += ks.buckets[x];
      }
      ks.total_ns = c.total.load(std::memory_order_acquire);
      std::uint64_t mn = c.min.load(std::memory_order_acquire), mx = c.max.load(std::memory_order_acquire);
      const std::uint32_t staged = std::min(c.staged_count.load(std::memory_order_acquire), stage_capacity);
      for (std::uint32_t x = 0; x < staged; ++x) {  // recorded, not yet folded in by the owner
        const std::uint64_t v = c.staged[x].load(std::memory_order_acquire);
        ++ks.buckets[histogram::bucket_of(v)];
        ks.total_ns += v;
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
      ks.count += staged;
      ks.min_ns = ks.count ? mn : 0;
      ks.max_ns = ks.count ? mx : 0;
    }
    return true;
  }

  static void merge(profile_snapshot& out, const std::vector<key_stats>& part) {
    for (std::size_t i = 0; i < Keys::size; ++i) out.keys[i] += part[i];
  }

  // Shared, mutable-through-const storage: recording is not a logical
  // mutation of the stages that hold a const profiler_ref.
  std::unique_ptr<shard[]> shards_;  // [0, Shards): exclusive; [Shards]: overflow
  const bool asymmetric_;
  alignas(64) mutable std::atomic<std::uint64_t> epoch_{0};
  mutable std::atomic<typename duration::rep> window_start_;
  mutable std::mutex reader_;  // take/clear/snapshot among themselves; never taken by record()
};

}  // namespace dflash
