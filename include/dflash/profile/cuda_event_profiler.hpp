#pragma once
// CudaEventProfiler: GPU-side durations of the stream work between begin and
// end, from pairs of cudaEvent_t, accumulated like AccumulatingProfiler.
//
//   dflash::CudaEventProfiler<keys> gpu{stream};
//   { auto t = gpu.scope("forward"_key); kernel<<<g, b, 0, stream>>>(...); }
//   auto s = gpu.snapshot();          // resolves finished pairs, then stats
//
// No synchronisation on the hot path: begin/end only cudaEventRecord into a
// fixed pool of reusable event pairs (created up front). Pairs are resolved
// lazily — cudaEventQuery, then cudaEventElapsedTime — by poll(), snapshot(),
// take(), or by begin() itself when the pool is out of free pairs; resolving
// never waits for the GPU (synchronize() does, for the end of a run).
// If every pair is still in flight, begin() drops that range and counts it
// (dropped()): memory is bounded and the GPU is never waited on.
//
// Streams: begin(k)/scope(k) record on the profiler's stream (set_stream());
// begin(k, s)/scope(k, s) record on s. end() records on the begin's stream.
// CUDA errors cannot be thrown from begin/end (they are noexcept): the first
// one is latched and thrown as std::runtime_error by the next poll()/snapshot().
//
// Host code: this header needs only the CUDA runtime API (g++ TUs linking
// CUDA::cudart work). It is not part of dflash.hpp; include it explicitly.

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#if !__has_include(<cuda_runtime_api.h>)
#error "dflash/profile/cuda_event_profiler.hpp needs the CUDA runtime headers (CMake: link CUDA::cudart)"
#endif
#include <cuda_runtime_api.h>

#include "dflash/detail/cuda_check.hpp"
#include "dflash/detail/std_chrono.hpp"
#include "dflash/profile/accumulating_profiler.hpp"
#include "dflash/profile/key.hpp"
#include "dflash/profile/profiler_policy.hpp"
#include "dflash/profile/report.hpp"
#include "dflash/profile/stats.hpp"

namespace dflash {

namespace detail {
/// Run-time key index → AccumulatingProfiler::add with the compile-time key.
/// (Instantiated through key_set::apply: nvcc cannot match key_set<N...>.)
template <fixed_string... N>
struct indexed_add_impl {
  template <class Acc>
  static void add(const Acc& a, std::size_t i, std::chrono::nanoseconds d) {
    std::size_t j = 0;
    (void)((j++ == i ? (a.add(key<N>, d), true) : false) || ...);
  }
};
}  // namespace detail

template <class Keys, std::size_t Shards = 8>
  requires ClosedKeySet<Keys>
class CudaEventProfiler {
  static constexpr std::uint32_t no_slot = UINT32_MAX;

 public:
  using keys = Keys;
  using duration = std::chrono::nanoseconds;
  using accumulator = AccumulatingProfiler<Keys, std::chrono::steady_clock, Shards>;
  static constexpr bool enabled = true;
  static constexpr std::size_t default_pool_size = 256;

  /// Which event pair a range uses (none if it was dropped) and its stream.
  struct token {
    std::uint32_t slot;
    cudaStream_t stream;
  };

  /// RAII range on a stream: records the end event on destruction.
  template <std::size_t I>
  class scope_type {
   public:
    scope_type(const CudaEventProfiler& p, cudaStream_t s) noexcept : p_(&p), t_(p.start(s)) {}
    scope_type(const scope_type&) = delete;
    scope_type& operator=(const scope_type&) = delete;
    ~scope_type() { p_->finish(I, t_); }

   private:
    const CudaEventProfiler* p_;
    token t_;
  };

  /// Creates `pool_size` event pairs on the current device. Throws
  /// std::invalid_argument for a zero pool, std::runtime_error if CUDA cannot
  /// create events (e.g. no device or driver).
  explicit CudaEventProfiler(cudaStream_t stream = nullptr, std::size_t pool_size = default_pool_size)
      : stream_(stream), size_(check_pool(pool_size)), slots_(std::make_unique<slot[]>(pool_size)) {
    for (std::size_t i = 0; i < size_; ++i) {
      for (cudaEvent_t* e : {&slots_[i].start, &slots_[i].stop}) {
        const cudaError_t err = cudaEventCreateWithFlags(e, cudaEventDefault);
        if (err != cudaSuccess) {
          detail::forget(err);  // reported by this throw; an unrelated pending error stays the caller's
          destroy_events();
          throw std::runtime_error("dflash::CudaEventProfiler: cannot create CUDA events (" +
                                   detail::cuda_error_text(err) + ")");
        }
      }
    }
  }
  ~CudaEventProfiler() { destroy_events(); }
  CudaEventProfiler(const CudaEventProfiler&) = delete;
  CudaEventProfiler& operator=(const CudaEventProfiler&) = delete;

  template <Key K>
  token begin(K) const noexcept {
    check_key<K>();
    return start(stream_.load(std::memory_order_relaxed));
  }
  template <Key K>
  token begin(K, cudaStream_t s) const noexcept {
    check_key<K>();
    return start(s);
  }
  template <Key K>
  void end(K, token t) const noexcept {
    check_key<K>();
    finish(Keys::index_of(K::name()), t);
  }
  template <Key K>
  [[nodiscard]] scope_type<Keys::index_of(K::name())> scope(K) const noexcept {
    check_key<K>();
    return {*this, stream_.load(std::memory_order_relaxed)};
  }
  template <Key K>
  [[nodiscard]] scope_type<Keys::index_of(K::name())> scope(K, cudaStream_t s) const noexcept {
    check_key<K>();
    return {*this, s};
  }
  /// A duration measured elsewhere. Negative → throws (AccumulatingProfiler::add).
  template <Key K, class Rep, class Period>
  void add(K k, std::chrono::duration<Rep, Period> d) const {
    acc_.add(k, d);
  }

  /// Stream used by begin(k)/scope(k) from now on.
  void set_stream(cudaStream_t s) noexcept { stream_.store(s, std::memory_order_relaxed); }
  cudaStream_t stream() const noexcept { return stream_.load(std::memory_order_relaxed); }

  /// Resolves every finished pair without waiting; returns how many. Throws
  /// std::runtime_error for a CUDA error (latched from begin/end or seen here).
  std::size_t poll() const {
    const std::size_t n = resolve();
    rethrow_latched();
    return n;
  }
  /// Waits for every pending pair, then resolves them. Not for the hot path.
  void synchronize() const {
    for (std::size_t i = 0; i < size_; ++i)
      if (slots_[i].state.load(std::memory_order_acquire) == slot_pending) {
        const cudaError_t err = cudaEventSynchronize(slots_[i].stop);
        if (err != cudaSuccess) latch(err);
      }
    poll();
  }

  profile_snapshot snapshot() const {
    poll();
    return acc_.snapshot();
  }
  profile_snapshot take() {
    poll();
    return acc_.take();
  }
  /// Forgets resolved stats; ranges still in flight land in the next window.
  void clear() {
    poll();
    acc_.clear();
  }
  /// The table of snapshot(). Only what a program asks for is compiled into it: the table here, JSON below.
  std::string summary() const { return format_table(snapshot()); }
  std::string summary(report_format f) const { return format_report(snapshot(), f); }
  std::string summary(const report_options& o) const { return format_report(snapshot(), o); }

  /// Resolved ranges of one key so far (does not poll).
  template <Key K>
  std::uint64_t count(K k) const noexcept {
    return acc_.count(k);
  }
  /// Ranges recorded but not yet resolved.
  std::size_t pending_count() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < size_; ++i) n += slots_[i].state.load(std::memory_order_relaxed) != slot_free;
    return n;
  }
  /// Ranges dropped because every event pair was in flight.
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::size_t pool_size() const noexcept { return size_; }
  const accumulator& accumulated() const noexcept { return acc_; }

 private:
  // Slot life: free → open (begin recorded; owned by the token holder) →
  // pending (end recorded) → resolving (one poller) → free.
  enum : std::uint32_t { slot_free = 0, slot_open = 1, slot_pending = 2, slot_resolving = 3 };
  struct alignas(64) slot {
    cudaEvent_t start = nullptr;
    cudaEvent_t stop = nullptr;
    std::atomic<std::uint32_t> state{slot_free};
    std::uint32_t key = 0;  // written by the owner before the release to pending
  };

  template <Key K>
  static constexpr void check_key() noexcept {
    require_key<Keys, K>();
  }

  static std::size_t check_pool(std::size_t n) {
    if (n == 0 || n >= no_slot)
      throw std::invalid_argument("dflash::CudaEventProfiler: pool_size must be in [1, 2^32 - 1), got " +
                                  std::to_string(n));
    return n;
  }

  std::uint32_t claim() const noexcept {
    const std::size_t first = cursor_.fetch_add(1, std::memory_order_relaxed);
    for (std::size_t k = 0; k < size_; ++k) {
      const std::size_t i = (first + k) % size_;
      std::uint32_t expect = slot_free;
      if (slots_[i].state.compare_exchange_strong(expect, slot_open, std::memory_order_acquire,
                                                  std::memory_order_relaxed))
        return static_cast<std::uint32_t>(i);
    }
    return no_slot;
  }

  token start(cudaStream_t s) const noexcept {
    std::uint32_t i = claim();
    if (i == no_slot) {
      resolve();  // reclaim finished pairs; never waits
      i = claim();
    }
    if (i == no_slot) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return {no_slot, s};
    }
    const cudaError_t err = cudaEventRecord(slots_[i].start, s);
    if (err != cudaSuccess) {
      latch(err);
      slots_[i].state.store(slot_free, std::memory_order_release);
      return {no_slot, s};
    }
    return {i, s};
  }

  void finish(std::size_t key, token t) const noexcept {
    if (t.slot == no_slot) return;
    slot& sl = slots_[t.slot];
    sl.key = static_cast<std::uint32_t>(key);
    const cudaError_t err = cudaEventRecord(sl.stop, t.stream);
    if (err != cudaSuccess) {
      latch(err);
      sl.state.store(slot_free, std::memory_order_release);
      return;
    }
    sl.state.store(slot_pending, std::memory_order_release);
  }

  // Non-throwing pass over the pool: errors are latched for poll().
  std::size_t resolve() const noexcept {
    std::size_t n = 0;
    for (std::size_t i = 0; i < size_; ++i) {
      slot& sl = slots_[i];
      std::uint32_t expect = slot_pending;
      if (!sl.state.compare_exchange_strong(expect, slot_resolving, std::memory_order_acquire, std::memory_order_relaxed))
        continue;
      const cudaError_t q = cudaEventQuery(sl.stop);
      if (q == cudaErrorNotReady) {
        detail::forget_not_ready();  // busy is an answer: leave no false error for the caller's next launch check
        sl.state.store(slot_pending, std::memory_order_release);
        continue;
      }
      float ms = 0.0f;
      const cudaError_t e = q == cudaSuccess ? cudaEventElapsedTime(&ms, sl.start, sl.stop) : q;
      const std::uint32_t key = sl.key;
      sl.state.store(slot_free, std::memory_order_release);
      if (e != cudaSuccess) {
        latch(e);
        continue;
      }
      try {
        Keys::template apply<detail::indexed_add_impl>::add(acc_, key, std::chrono::nanoseconds(std::llround(double(ms) * 1e6)));
        ++n;
      } catch (...) {  // cannot happen for ms >= 0; never let it escape a noexcept begin()
        latch(cudaErrorUnknown);
      }
    }
    return n;
  }

  void latch(cudaError_t e) const noexcept {
    detail::forget(e);  // reported by poll(), not by the caller's next launch check; any other error stays theirs
    int expect = 0;
    error_.compare_exchange_strong(expect, static_cast<int>(e), std::memory_order_relaxed);
  }
  void rethrow_latched() const {
    const int e = error_.exchange(0, std::memory_order_relaxed);
    if (e != 0)
      throw std::runtime_error("dflash::CudaEventProfiler: CUDA error while timing (" +
                               detail::cuda_error_text(static_cast<cudaError_t>(e)) + ")");
  }

  void destroy_events() noexcept {
    for (std::size_t i = 0; i < size_; ++i)
      for (cudaEvent_t e : {slots_[i].start, slots_[i].stop})
        if (e != nullptr) (void)cudaEventDestroy(e);
  }

  std::atomic<cudaStream_t> stream_;
  std::size_t size_;
  std::unique_ptr<slot[]> slots_;
  accumulator acc_;
  mutable std::atomic<std::size_t> cursor_{0};
  mutable std::atomic<std::uint64_t> dropped_{0};
  mutable std::atomic<int> error_{0};
};

}  // namespace dflash
