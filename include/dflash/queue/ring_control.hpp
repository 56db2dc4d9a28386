#pragma once
// ring_control: the lock-free control logic of dflash's device queue, written
// once for host and device (libcu++ cuda::atomic_ref over plain memory, so the
// same words can live in cudaMalloc'd memory or in host memory).
//
// A ring of `capacity` slots addressed by ever-growing 64-bit positions
// (slot = pos % capacity, so wrap-around is arithmetic, never a special case).
// Each slot carries a sequence word (Vyukov's bounded MPMC scheme, with the
// position doubled so that the three states stay distinct for every capacity —
// with Vyukov's pos / pos+1 / pos+capacity, capacity 1 makes "published for p"
// and "free for p+1" the same value):
//   seq == 2*pos                  slot free for the producer of position pos
//   seq == 2*pos + 1              slot holds the item of position pos (published)
//   seq == 2*(pos + capacity)     released by its consumer: free for the next lap
// Producers reserve n consecutive positions with ONE compare-and-swap on the
// enqueue word (so a warp or block that aggregates its items pays one atomic),
// write, then publish each slot; consumers reserve up to n published
// positions with one CAS on the dequeue word, read, then release each slot.
// All operations are non-blocking ("try"): a GPU kernel must never spin
// waiting for a kernel that may not be resident.
//
// close() sets the top bit of the enqueue word, so a producer's CAS and close
// are totally ordered: no push can succeed after close() returned, and a
// consumer reports `closed` only when every reserved position was consumed.

#include "dflash/detail/require_cccl.hpp"  // first: a clear error without CCCL

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <cuda/atomic>

#include "dflash/config.hpp"
#include "dflash/detail/capacity.hpp"

namespace dflash {

/// The shared words of one ring (16 bytes); value-initialise, then init().
struct ring_header {
  unsigned long long enqueue;  ///< next position to reserve for writing, | closed_bit
  unsigned long long dequeue;  ///< next position to reserve for reading
};

enum class ring_status : std::uint8_t {
  ok,         ///< reserved `count` positions starting at `first`
  full,       ///< push: not enough free slots now
  empty,      ///< pop: nothing published now (producers may still be writing)
  closed,     ///< push: ring closed; pop: closed and everything consumed
  too_large,  ///< push: more slots requested than the ring has
  invalid,    ///< push: bad request (a packed length < 0 or > max_len); nothing reserved
};

struct ring_ticket {
  ring_status status;
  std::uint32_t count;       ///< positions reserved (0 unless ok)
  unsigned long long first;  ///< first reserved position
};

/// A non-owning view: header + sequence array of `capacity` words.
/// Trivially copyable, so it can be passed by value to a kernel.
/// Precondition: 1 <= capacity <= max_capacity — the view is noexcept and
/// device-callable, so its owners validate with check_capacity() and throw.
class ring_control {
 public:
  static constexpr unsigned long long closed_bit = 1ull << 63;
  using atomic_ref = cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>;

  /// Largest capacity the encoding serves (detail/capacity.hpp).
  static constexpr unsigned long long max_capacity = detail::max_ring_capacity;

  /// Host-side validation for owners of a ring (host_ring, device_queue):
  /// throws std::invalid_argument "<who>: capacity must be ..." for 0 or > max_capacity.
  static void check_capacity(std::size_t capacity, std::string_view who) { detail::check_capacity(capacity, who); }

  /// Bytes an owner allocates for a ring of `capacity` slots of `slot_bytes`
  /// each: its sequence words and its slots.
  struct storage_bytes {
    std::size_t sequence;  ///< capacity 64-bit sequence words
    std::size_t slots;     ///< capacity * slot_bytes
  };
  /// check_capacity, then the sizes; throws std::length_error "<who>: ..."
  /// when one does not fit std::size_t. Unchecked, 2^61 slots of 8 bytes
  /// wrap to 0 bytes, cudaMalloc(0) succeeds, and initialising the ring
  /// writes far out of bounds.
  static storage_bytes storage_for(std::size_t capacity, std::size_t slot_bytes, std::string_view who) {
    check_capacity(capacity, who);
    constexpr std::size_t most = static_cast<std::size_t>(-1);
    const std::size_t widest = slot_bytes > sizeof(unsigned long long) ? slot_bytes : sizeof(unsigned long long);
    if (capacity > most / widest)
      throw std::length_error(std::string(who) + ": " + std::to_string(capacity) + " slots of " +
                              std::to_string(slot_bytes) + " bytes do not fit in memory (the size overflows std::size_t)");
    return {capacity * sizeof(unsigned long long), capacity * slot_bytes};
  }

  ring_control() = default;
  DFLASH_HOST_DEVICE ring_control(ring_header* h, unsigned long long* seq, unsigned long long capacity) noexcept
      : h_(h), seq_(seq), cap_(capacity) {}

  /// Initial state (not thread-safe; before any other use). Slot i is free for position i.
  DFLASH_HOST_DEVICE void init_slot(unsigned long long i) const noexcept { seq_[i] = 2 * i; }
  DFLASH_HOST_DEVICE void init_header() const noexcept { h_->enqueue = h_->dequeue = 0; }

  DFLASH_HOST_DEVICE unsigned long long capacity() const noexcept { return cap_; }
  DFLASH_HOST_DEVICE unsigned long long slot(unsigned long long pos) const noexcept { return pos % cap_; }

  /// Reserve exactly n consecutive positions for writing, or none.
  DFLASH_HOST_DEVICE ring_ticket try_reserve_push(std::uint32_t n) const noexcept {
    if (n > cap_) return {ring_status::too_large, 0, 0};
    atomic_ref enq(h_->enqueue);
    unsigned long long word = enq.load(cuda::std::memory_order_relaxed);
    for (;;) {
      if (word & closed_bit) return {ring_status::closed, 0, 0};
      const unsigned long long pos = word;
      bool stale = false;
      for (std::uint32_t i = 0; i < n; ++i) {
        const long long d = diff(seq(pos + i).load(cuda::std::memory_order_acquire), 2 * (pos + i));
        if (d < 0) {
          // Slot still holds last lap's item: full, unless our view of the
          // enqueue word is outdated.
          const unsigned long long now = enq.load(cuda::std::memory_order_relaxed);
          if (now == word) return {ring_status::full, 0, 0};
          word = now;
          stale = true;
          break;
        }
        if (d > 0) {  // another producer already took this position
          word = enq.load(cuda::std::memory_order_relaxed);
          stale = true;
          break;
        }
      }
      if (stale) continue;
      if (enq.compare_exchange_weak(word, pos + n, cuda::std::memory_order_relaxed, cuda::std::memory_order_relaxed))
        return {ring_status::ok, n, pos};
    }
  }

  /// Make the item at a reserved position visible to consumers.
  DFLASH_HOST_DEVICE void publish(unsigned long long pos) const noexcept {
    seq(pos).store(2 * pos + 1, cuda::std::memory_order_release);
  }

  /// Reserve up to max_n consecutive published positions for reading; none
  /// (empty) when fewer than at_least are published.
  DFLASH_HOST_DEVICE ring_ticket try_reserve_pop(std::uint32_t max_n, std::uint32_t at_least = 1) const noexcept {
    if (at_least > max_n) at_least = max_n;
    atomic_ref deq(h_->dequeue);
    unsigned long long pos = deq.load(cuda::std::memory_order_relaxed);
    for (;;) {
      std::uint32_t k = 0;
      bool stale = false;
      while (k < max_n) {
        const long long d = diff(seq(pos + k).load(cuda::std::memory_order_acquire), 2 * (pos + k) + 1);
        if (d == 0) {
          ++k;
          continue;
        }
        if (d > 0) {  // consumed by someone else since we read pos
          pos = deq.load(cuda::std::memory_order_relaxed);
          stale = true;
        }
        break;  // d < 0: not published yet
      }
      if (stale) continue;
      if (k > 0 && k < at_least) {
        // Fewer than asked: unless another reader moved on meanwhile (its
        // positions still read as published until released), take none.
        const unsigned long long now = deq.load(cuda::std::memory_order_relaxed);
        if (now != pos) {
          pos = now;
          continue;
        }
        return {ring_status::empty, 0, 0};
      }
      if (k == 0) {
        const unsigned long long word = atomic_ref(h_->enqueue).load(cuda::std::memory_order_acquire);
        const unsigned long long now = deq.load(cuda::std::memory_order_relaxed);
        if (now != pos) {
          pos = now;
          continue;
        }
        if ((word & closed_bit) && (word & ~closed_bit) == pos) return {ring_status::closed, 0, 0};
        return {ring_status::empty, 0, 0};
      }
      if (deq.compare_exchange_weak(pos, pos + k, cuda::std::memory_order_relaxed, cuda::std::memory_order_relaxed))
        return {ring_status::ok, k, pos};
    }
  }

  /// Hand the slot of a consumed position back to producers (next lap).
  DFLASH_HOST_DEVICE void release(unsigned long long pos) const noexcept {
    seq(pos).store(2 * (pos + cap_), cuda::std::memory_order_release);
  }

  /// After close(), every push fails; pops drain, then report closed.
  DFLASH_HOST_DEVICE void close() const noexcept {
    atomic_ref(h_->enqueue).fetch_or(closed_bit, cuda::std::memory_order_acq_rel);
  }
  DFLASH_HOST_DEVICE bool closed() const noexcept {
    return (atomic_ref(h_->enqueue).load(cuda::std::memory_order_acquire) & closed_bit) != 0;
  }
  /// Reserved-for-writing minus reserved-for-reading (exact when quiescent).
  DFLASH_HOST_DEVICE unsigned long long size_approx() const noexcept {
    const unsigned long long e = atomic_ref(h_->enqueue).load(cuda::std::memory_order_acquire) & ~closed_bit;
    const unsigned long long d = atomic_ref(h_->dequeue).load(cuda::std::memory_order_acquire);
    return e > d ? e - d : 0;
  }

 private:
  DFLASH_HOST_DEVICE atomic_ref seq(unsigned long long pos) const noexcept { return atomic_ref(seq_[pos % cap_]); }
  DFLASH_HOST_DEVICE static long long diff(unsigned long long a, unsigned long long b) noexcept {
    return static_cast<long long>(a - b);
  }

  ring_header* h_ = nullptr;
  unsigned long long* seq_ = nullptr;
  unsigned long long cap_ = 0;
};

}  // namespace dflash

// ---- host twin -------------------------------------------------------------
namespace dflash {

/// The device queue's ring in host memory, driven by the same ring_control:
/// what CI stress-tests on host threads, and a CPU fallback for the device path.
template <class T>
class host_ring {
 public:
  explicit host_ring(std::size_t capacity)
      : header_(std::make_unique<ring_header>()), seq_(checked(capacity)), data_(capacity),
        ctl_(header_.get(), seq_.data(), capacity) {
    ctl_.init_header();
    for (std::size_t i = 0; i < capacity; ++i) ctl_.init_slot(i);
  }
  host_ring(const host_ring&) = delete;
  host_ring& operator=(const host_ring&) = delete;

  /// All n items or none: ok, full, closed or too_large.
  [[nodiscard]] ring_status try_push(const T* items, std::uint32_t n) {
    const ring_ticket t = ctl_.try_reserve_push(n);
    if (t.status != ring_status::ok) return t.status;
    for (std::uint32_t i = 0; i < n; ++i) {
      data_[ctl_.slot(t.first + i)] = items[i];
      ctl_.publish(t.first + i);
    }
    return ring_status::ok;
  }
  /// Up to max_n items into out; the ticket says how many (and from which position).
  [[nodiscard]] ring_ticket try_pop(T* out, std::uint32_t max_n) {
    const ring_ticket t = ctl_.try_reserve_pop(max_n);
    for (std::uint32_t i = 0; i < t.count; ++i) {
      out[i] = data_[ctl_.slot(t.first + i)];
      ctl_.release(t.first + i);
    }
    return t;
  }
  void close() noexcept { ctl_.close(); }
  [[nodiscard]] bool closed() const noexcept { return ctl_.closed(); }
  [[nodiscard]] std::size_t capacity() const noexcept { return seq_.size(); }
  [[nodiscard]] std::size_t size_approx() const noexcept { return ctl_.size_approx(); }
  [[nodiscard]] const ring_control& control() const noexcept { return ctl_; }

 private:
  static std::size_t checked(std::size_t capacity) {
    ring_control::check_capacity(capacity, "dflash::host_ring");
    return capacity;
  }
  std::unique_ptr<ring_header> header_;
  std::vector<unsigned long long> seq_;
  std::vector<T> data_;
  ring_control ctl_;
};

}  // namespace dflash
