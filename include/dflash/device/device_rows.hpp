#pragma once
// device_rows<Row, B, Elem>: what crosses a dflash::device_queue_link — rows
// in a ring in device memory, not whole items. A row is a trivially copyable
// Row and, when Elem is not void, a payload of width() Elems whose width is
// set at run time (the link's shape: a hidden state of the model's width). A
// producer call gets a row_pusher (push up to the link's rows-per-push bound
// from device code); a consumer call gets a row_batch (up to the link's batch
// size, popped on its stream). Neither count is ever read by the host on the
// per-item path: the pusher counts into device memory, the batch's count
// lives in device memory for the consumer's kernels (row_batch::count()).
//
//   producer:  rows.pusher()  -> row_pusher   push(row) / push(rows, n) / push(row, payload),
//                                             or reserve(n), then row(t, i) / payload(t, i), publish(t, i)
//   consumer:  rows.batch()   -> row_batch    count(), operator[](i), payload(i), in work on the consumer's stream
//
// Both views are trivially copyable: pass them to a kernel by value (or
// capture them in the host twin's enqueued work). Warp- and block-aggregated
// pushes (cub::WarpReduce / BlockReduce, one reservation per group) and a
// warp-wide row write are in device/device_rows.cuh.

#include "dflash/detail/require_cccl.hpp"  // first: ring_control needs libcu++

#include <cstdint>
#include <type_traits>

#include <cuda/atomic>

#include "dflash/config.hpp"
#include "dflash/device/device_stream.hpp"
#include "dflash/queue/ring_control.hpp"

namespace dflash {

/// Where a producer call pushes its rows. Every push counts the rows it was
/// asked for, so a call that exceeds the link's bound is reported (the link
/// reserved room for `bound` rows, and no more); a push that did not fit
/// also marks the count failed, so that its lost rows fail the run.
template <class Row, class Elem = void>
struct row_pusher {
  ring_control ctl;
  Row* data = nullptr;
  Elem* payloads = nullptr;              ///< width Elems per ring slot (Elem not void)
  std::uint32_t width = 0;               ///< payload Elems per row (0: no payload)
  unsigned long long* pushed = nullptr;  ///< rows this call asked to push (device memory), | failed_bit
  std::uint32_t bound = 0;               ///< the most rows this call may push

  static constexpr unsigned long long failed_bit = 1ull << 63;
  static constexpr bool has_payload = !std::is_void_v<Elem>;

  /// One row; false if it did not fit (only past the bound: the run fails).
  DFLASH_HOST_DEVICE bool push(const Row& r) const noexcept
    requires(!has_payload)
  {
    return push(&r, 1);
  }
  /// n consecutive rows, all or none; false if they did not fit (only past the bound: the run fails).
  DFLASH_HOST_DEVICE bool push(const Row* rows, std::uint32_t n) const noexcept
    requires(!has_payload)
  {
    const ring_ticket t = reserve(n);
    if (t.status != ring_status::ok) return false;
    for (std::uint32_t i = 0; i < n; ++i) {
      row(t, i) = rows[i];
      publish(t, i);
    }
    return true;
  }
  /// One row and its payload (width() Elems from `p`); false if it did not fit.
  DFLASH_HOST_DEVICE bool push(const Row& r, const Elem* p) const noexcept
    requires has_payload
  {
    const ring_ticket t = reserve(1);
    if (t.status != ring_status::ok) return false;
    row(t, 0) = r;
    Elem* dst = payload(t, 0);
    for (std::uint32_t k = 0; k < width; ++k) dst[k] = p[k];
    publish(t, 0);
    return true;
  }

  /// n rows to write in pieces (by many threads, or row and payload apart):
  /// reserve once, fill row(t, i) and payload(t, i), then publish(t, i) each
  /// row once it is written. Counts n; status != ok: nothing reserved, the
  /// run fails (only past the bound).
  DFLASH_HOST_DEVICE ring_ticket reserve(std::uint32_t n) const noexcept {
    count(n);
    const ring_ticket t = ctl.try_reserve_push(n);
    if (t.status != ring_status::ok) fail();
    return t;
  }
  DFLASH_HOST_DEVICE Row& row(const ring_ticket& t, std::uint32_t i) const noexcept { return data[ctl.slot(t.first + i)]; }
  DFLASH_HOST_DEVICE Elem* payload(const ring_ticket& t, std::uint32_t i) const noexcept
    requires has_payload
  {
    return payloads + ctl.slot(t.first + i) * width;
  }
  /// Row i of t (and its payload) is for the consumers: after every write to it.
  DFLASH_HOST_DEVICE void publish(const ring_ticket& t, std::uint32_t i) const noexcept { ctl.publish(t.first + i); }

  /// For aggregated pushes (device_rows.cuh): count n rows a group asked to push.
  DFLASH_HOST_DEVICE void count(std::uint64_t n) const noexcept {
    counter().fetch_add(n, cuda::std::memory_order_relaxed);
  }
  /// For aggregated pushes: the group's rows did not fit.
  DFLASH_HOST_DEVICE void fail() const noexcept { counter().fetch_or(failed_bit, cuda::std::memory_order_relaxed); }

 private:
  DFLASH_HOST_DEVICE cuda::atomic_ref<unsigned long long, cuda::thread_scope_device> counter() const noexcept {
    return cuda::atomic_ref<unsigned long long, cuda::thread_scope_device>(*pushed);
  }
};

/// The rows one consumer call got: `count()` of them, read on the
/// consumer's stream (its kernels, or the twin's enqueued work) — never on
/// the host thread, which does not know the count.
template <class Row, class Elem = void>
struct row_batch {
  const Row* data = nullptr;
  const Elem* payloads = nullptr;
  std::uint32_t width = 0;
  unsigned long long capacity = 0;
  const ring_ticket* ticket = nullptr;  ///< written by the pop, in device memory

  DFLASH_HOST_DEVICE std::uint32_t count() const noexcept { return ticket->count; }
  DFLASH_HOST_DEVICE const Row& operator[](std::uint32_t i) const noexcept { return data[slot(i)]; }
  /// Row i's payload: width Elems.
  DFLASH_HOST_DEVICE const Elem* payload(std::uint32_t i) const noexcept
    requires(!std::is_void_v<Elem>)
  {
    return payloads + slot(i) * width;
  }

 private:
  DFLASH_HOST_DEVICE unsigned long long slot(std::uint32_t i) const noexcept { return (ticket->first + i) % capacity; }
};

/// The item type of a device_queue_link: a stage's output_type (producer) and
/// the next stage's input_type (consumer). The link fills it per call. With
/// Elem not void, every row carries width Elems (the shape's
/// rows[link].width, set at run time).
template <class Row, DeviceBackend B, class Elem = void>
struct device_rows : device_item<B> {
  static_assert(std::is_trivially_copyable_v<Row>,
                "dflash::device_rows<Row, B, Elem>: Row must be trivially copyable (rows are copied into and out of a "
                "ring in device memory)");
  static_assert(std::is_void_v<Elem> || std::is_trivially_copyable_v<Elem>,
                "dflash::device_rows<Row, B, Elem>: Elem, the payload's element, must be trivially copyable (or void "
                "for rows without a payload)");
  using row_type = Row;
  using elem_type = Elem;

  [[nodiscard]] const row_pusher<Row, Elem>& pusher() const noexcept { return push_; }
  [[nodiscard]] const row_batch<Row, Elem>& batch() const noexcept { return batch_; }

  row_pusher<Row, Elem> push_{};
  row_batch<Row, Elem> batch_{};
};

}  // namespace dflash
