#pragma once
// pinned_pool<B>: pinned host memory for asynchronous device <-> host copies, reused. Allocating
// it (cudaMallocHost) and freeing it (cudaFreeHost) synchronise the whole device, so a stage
// that allocates per item stalls every stream; a pool allocates once per block and hands blocks
// out again.
//
//   dflash::pinned_pool<B> pool(backend, 256 << 20);  // holds at most 256 MiB, in use or cached
//   auto blk = pool.acquire(bytes);                     // a block of at least `bytes`
//   backend.copy(blk.data(), d_src, bytes, s);          // an asynchronous copy into it
//   ...                                                 // the consumer reads it after the copy
//   pool.give_back(std::move(blk), s);                  // reused only after s's work so far
//
// give_back and used_on may be combined and repeated: a block is reused only after every work
// they marked.
// A block the host reads after the copy (results unpacked by a later stage) is marked instead,
// blk.used_on(s) right after the copy is enqueued, and dropped whenever the host is done with it.
//
// A block given back with a stream is handed out again only once the work enqueued on that
// stream before it completed: an event recorded there, queried, never waited on by the host on
// this path. Sizes are rounded up to a power of two (at least 256 bytes) so requests of varying
// size reuse blocks. The bound covers every byte the pool holds; a request that would pass it
// first frees cached blocks whose work is done; if still over, acquire waits for cached blocks
// whose work is pending (backpressure: the host is ahead of its streams) and try_acquire returns
// empty. Blocks handed out and not given back are the caller's to return: when they alone fill
// the bound, acquire throws std::length_error naming it — a bound is never silently raised.
// Single device: a block's event belongs to the device current when it was made, and the streams
// it is given back with must be of that device (as CUDA requires for a record).

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "dflash/device/backend.hpp"

namespace dflash {

/// What a pinned_pool holds and has done (a snapshot).
struct pinned_pool_stats {
  std::size_t bytes_in_use = 0;     ///< blocks handed out now
  std::size_t bytes_cached = 0;     ///< blocks kept for reuse
  std::size_t high_water = 0;       ///< the most bytes in use at once
  std::size_t bound = 0;            ///< the most bytes the pool may hold
  std::uint64_t allocations = 0;    ///< blocks allocated from the backend
  std::uint64_t reuses = 0;         ///< requests served from the cache
  std::uint64_t frees = 0;          ///< cached blocks freed to make room
};

template <DeviceBackend B>
class pinned_pool {
  struct slab {
    void* p = nullptr;
    std::size_t bytes = 0;
    typename B::event_type done{};
    bool recorded = false;  // `done` marks work that may still use the block
  };

 public:
  /// A block of pinned memory; move-only. Dropped without give_back, it returns at once: reusable
  /// at once, or, once marked with used_on, after the work marked.
  class block {
   public:
    block() = default;
    block(block&& o) noexcept : pool_(std::exchange(o.pool_, nullptr)), s_(o.s_) {}
    block& operator=(block&& o) noexcept {
      if (this != &o) {
        reset();
        pool_ = std::exchange(o.pool_, nullptr);
        s_ = o.s_;
      }
      return *this;
    }
    ~block() { reset(); }
    [[nodiscard]] void* data() const noexcept { return s_.p; }
    /// Marks the work enqueued on `s` so far as the block's last device use: dropped later (on
    /// any thread, after the stream may be gone), it is reused only once that work completed.
    /// For a block the host keeps past its copy (results read after the stream's event).
    /// Marking again (another stream, or give_back later) keeps the earlier marks: the new
    /// stream waits for them first. A failed record waits for `s` on the host, then rethrows.
    void used_on(typename B::stream_type s) {
      if (!pool_) throw std::logic_error("dflash::pinned_pool::block::used_on: an empty block");
      pool_->mark(s_, s);
    }
    [[nodiscard]] std::size_t size() const noexcept { return s_.bytes; }
    explicit operator bool() const noexcept { return pool_ != nullptr; }
    void reset() noexcept {
      if (pool_) std::exchange(pool_, nullptr)->put(s_, s_.recorded);
    }

   private:
    friend class pinned_pool;
    block(pinned_pool* pool, const slab& s) noexcept : pool_(pool), s_(s) {}
    pinned_pool* pool_ = nullptr;
    slab s_{};
  };

  /// `backend` must outlive the pool; `bound` is in bytes (at least one block of 256 bytes).
  pinned_pool(B& backend, std::size_t bound) : b_(backend), bound_(bound) {
    if (bound < min_block)
      throw std::invalid_argument("dflash::pinned_pool: a bound of " + std::to_string(bound) +
                                  " bytes holds no block (the smallest is " + std::to_string(min_block) + ")");
  }
  pinned_pool(const pinned_pool&) = delete;
  pinned_pool& operator=(const pinned_pool&) = delete;

  /// Waits (teardown, not the per-item path) for the work still using cached blocks, then frees
  /// them. Blocks still handed out are a bug of the caller's: said on stderr and not freed.
  ~pinned_pool() {
    for (slab& s : cache_) drop(s);
    if (in_use_ > 0)
      std::fprintf(stderr, "dflash::pinned_pool: destroyed with %zu bytes still handed out; they are not freed\n",
                   in_use_);
  }

  /// A block of at least `bytes`, or empty when it would pass the bound.
  [[nodiscard]] std::optional<block> try_acquire(std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    std::lock_guard lk(m_);
    for (std::size_t i = 0; i < cache_.size(); ++i)
      if (cache_[i].bytes == size && finished(cache_[i])) {
        ++reuses_;
        return hand_out(take_cached(i));
      }
    // Room for a new block: free finished cached blocks (largest first) until it fits.
    if (in_use_ + cached_ + size > bound_) {
      std::sort(cache_.begin(), cache_.end(), [](const slab& a, const slab& b) { return a.bytes > b.bytes; });
      for (std::size_t i = 0; i < cache_.size() && in_use_ + cached_ + size > bound_;)
        if (finished(cache_[i])) {
          if (cache_[i].bytes == size) {  // its work ended since the look above: reuse, not free
            ++reuses_;
            return hand_out(take_cached(i));
          }
          slab gone = take_cached(i);
          drop(gone);
          ++frees_;
        } else {
          ++i;
        }
      if (in_use_ + cached_ + size > bound_) return std::nullopt;
    }
    slab s;
    s.bytes = size;
    s.p = b_.allocate_host(size);
    try {
      s.done = b_.create_event(false);
    } catch (...) {
      b_.deallocate_host(s.p);
      throw;
    }
    ++allocations_;
    return hand_out(s);
  }

  /// A block of at least `bytes`. At the bound, waits (host-side: backpressure, as a full
  /// queue) for cached blocks whose work is still pending; std::length_error when the blocks
  /// handed out alone leave no room, as no wait can make it.
  [[nodiscard]] block acquire(std::size_t bytes) {
    const std::size_t size = size_class(bytes);
    for (;;) {
      if (auto b = try_acquire(bytes)) return std::move(*b);
      if (!wait_for_pending(size)) break;
    }
    const pinned_pool_stats st = stats();
    throw std::length_error("dflash::pinned_pool: " + std::to_string(bytes) + " bytes (a block of " +
                            std::to_string(size_class(bytes)) + ") would pass the bound of " +
                            std::to_string(st.bound) + " bytes: " + std::to_string(st.bytes_in_use) +
                            " in use, " + std::to_string(st.bytes_cached) +
                            " cached; raise the bound or give blocks back sooner");
  }

  /// Returns `blk`; it is handed out again only after the work enqueued on `s` so far. If the
  /// record fails (the stream failed), the host waits for the stream first: a block whose last
  /// work is unknown is never reused.
  void give_back(block&& blk, typename B::stream_type s) {
    if (!blk.pool_) return;
    blk.pool_ = nullptr;
    try {
      mark(blk.s_, s);
    } catch (...) {
      put(blk.s_, blk.s_.recorded);
      throw;
    }
    put(blk.s_, true);
  }

  [[nodiscard]] pinned_pool_stats stats() const {
    std::lock_guard lk(m_);
    return {in_use_, cached_, high_water_, bound_, allocations_, reuses_, frees_};
  }

  /// The size a request of `bytes` is served with.
  [[nodiscard]] static std::size_t size_class(std::size_t bytes) {
    if (bytes > (std::size_t{1} << (sizeof(std::size_t) * 8 - 2)))
      throw std::length_error("dflash::pinned_pool: a request of " + std::to_string(bytes) + " bytes is too large");
    return std::max(min_block, std::bit_ceil(bytes));
  }

  static constexpr std::size_t min_block = 256;

 private:
  // The block's event marks the work on `s` so far, after any work it marked before (s waits
  // for that first: one event, several streams). On a failed record the host waits for s.
  void mark(slab& sl, typename B::stream_type s) {
    try {
      if (sl.recorded) b_.wait(s, sl.done);
      b_.record(sl.done, s);
    } catch (...) {
      detail::quiet_synchronize(b_, s);
      if (sl.recorded) detail::quiet_host_wait(b_, sl.done);
      sl.recorded = false;  // what it marked has ended
      throw;
    }
    sl.recorded = true;
  }
  // Cached block i, out of the cache (the rest keep their order).
  slab take_cached(std::size_t i) {
    const slab s = cache_[i];
    cache_.erase(cache_.begin() + static_cast<std::ptrdiff_t>(i));
    cached_ -= s.bytes;
    return s;
  }
  block hand_out(const slab& s) {
    in_use_ += s.bytes;
    high_water_ = std::max(high_water_, in_use_);
    return block(this, s);
  }
  void put(slab s, bool recorded) noexcept {
    s.recorded = recorded;
    std::lock_guard lk(m_);
    in_use_ -= s.bytes;
    try {
      cache_.push_back(s);
      cached_ += s.bytes;
    } catch (...) {  // no memory for the list: free the block instead
      drop(s);
    }
  }
  // false: the blocks handed out leave no room for `size`, and no wait can make it. Otherwise
  // waits for the work on one cached block, if one still has some (its work may also have ended
  // since try_acquire looked: then the next try finds it). Under the lock, so that no other
  // thread reuses or frees the block (and its event) meanwhile.
  bool wait_for_pending(std::size_t size) {
    std::lock_guard lk(m_);
    if (in_use_ + size > bound_) return false;
    for (slab& c : cache_)
      if (c.recorded && !finished(c)) {
        detail::quiet_host_wait(b_, c.done);  // a failed stream's work on the block has ended too
        c.recorded = false;
        break;
      }
    return true;
  }
  bool finished(slab& s) {
    if (!s.recorded) return true;
    if (!b_.query(s.done)) return false;
    s.recorded = false;
    return true;
  }
  void drop(slab& s) noexcept {
    if (s.recorded) detail::quiet_host_wait(b_, s.done);
    b_.destroy_event(s.done);
    b_.deallocate_host(s.p);
  }

  B& b_;
  const std::size_t bound_;
  mutable std::mutex m_;
  std::vector<slab> cache_;
  std::size_t in_use_ = 0, cached_ = 0, high_water_ = 0;
  std::uint64_t allocations_ = 0, reuses_ = 0, frees_ = 0;
};

}  // namespace dflash
